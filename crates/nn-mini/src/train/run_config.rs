//! `RunConfig`: what the training loops need to know about the kind of run they train.
//!
//! A training run is a configuration (stored in its checkpoints) from which everything
//! else is built: the model, the optimiser, the loader, the dropout generator. The
//! loops around it (the single-process [`TrainLoop`](super::TrainLoop) and
//! `distributed`'s data parallel one) and the run's state and checkpoint code
//! ([`RunState`](super::RunState)) are the same for every kind of run; what differs is
//! behind this trait: how the run is built, its loss, and what happens between the
//! gradients and the next step (an optimiser step; for a GPT also gradient clipping, a
//! learning-rate schedule and a check for NaN). The MLP of `train_resume`
//! ([`TrainConfig`](super::TrainConfig)) and the GPT of `train_gpt`
//! ([`GptTrainConfig`](crate::gpt::GptTrainConfig)) implement it.

use serde::de::DeserializeOwned;
use serde::Serialize;
use tensor_core::{Device, Tensor};

use super::{FreshRun, RunState, TrainingRun};
use crate::data::RankShare;
use crate::{Module, NnError, Result};

/// A kind of training run, described by its configuration.
///
/// The configuration is serde-derived: its JSON is what checkpoints store, so the trait
/// writes and reads it once for every kind of run.
pub trait RunConfig:
    Clone + std::fmt::Debug + PartialEq + Send + Sized + Serialize + DeserializeOwned + 'static
{
    /// The model the run trains.
    type Model: Module + 'static;

    /// The model's name in checkpoints (metadata `train.model`): a checkpoint of one
    /// kind of run refuses to resume as another, naming both.
    const MODEL_KIND: &'static str;

    /// The run seed: every random number of the run derives from it.
    fn seed(&self) -> u64;

    /// Rows per (global) batch.
    fn batch_size(&self) -> usize;

    /// Samples per epoch of the run's dataset.
    fn samples_per_epoch(&self) -> usize;

    /// Where the model runs.
    fn device(&self) -> Device;

    /// Where a step hands the model its input batch: the model's device by default.
    /// A model whose first layer takes indices it checks on the host (a GPT's token
    /// embedding, [`crate::Embedding`]) takes them on the host and places them itself,
    /// so a step neither uploads them twice nor waits to read them back.
    fn input_device(&self) -> Device {
        self.device()
    }

    /// A resume may move the run to another device and worker count (neither changes a
    /// random stream; see the configuration's docs for the arithmetic).
    fn place(&mut self, device: Device, num_workers: usize);

    /// Loader worker threads (never change a number).
    fn num_workers(&self) -> usize;

    /// Errors on values that cannot make a run, before anything is allocated.
    fn validate(&self) -> Result<()>;

    /// The JSON stored in checkpoints (metadata `train.config`). It goes through a
    /// `serde_json::Value`, whose objects keep their keys sorted: the bytes checkpoints
    /// have always stored (hand-written `json!` values before the derive), so existing
    /// files re-save and hash the same whatever order the fields are declared in.
    fn to_json(&self) -> String {
        serde_json::to_value(self)
            .expect("a derived Serialize of numbers, strings and sequences cannot fail")
            .to_string()
    }

    /// Parses [`to_json`](Self::to_json) output and validates it: a checkpoint's
    /// configuration is input, so a malformed one is a typed error (serde's message
    /// names a missing field, or the position of a mistyped one), never a panic.
    fn from_json(text: &str) -> Result<Self> {
        let config: Self = serde_json::from_str(text).map_err(|e| {
            NnError::invalid(
                "RunConfig::from_json",
                format!("the {} run's configuration: {e}", Self::MODEL_KIND),
            )
        })?;
        config.validate()?;
        Ok(config)
    }

    /// The names and dims of the model's parameters, in the model's order, computed
    /// without building it (so a checkpoint is checked before anything is allocated).
    fn parameter_shapes(&self) -> Vec<(String, Vec<usize>)>;

    /// Builds the run at step 0 from the configuration alone (after
    /// [`validate`](Self::validate)); with `shard`, its loader loads one rank's share
    /// of every batch.
    fn build(self, shard: Option<RankShare>) -> Result<FreshRun<Self>>;

    /// The loss of `output` against `target` (the mean over the rows given) and its
    /// gradient with respect to `output`.
    fn loss(&self, output: &Tensor, target: &Tensor) -> Result<(Tensor, Tensor)>;

    /// Everything between a step's gradients (in `model`'s parameters) and the next
    /// step: [`prepare_update`](Self::prepare_update), then
    /// [`apply_update`](Self::apply_update). Called before the step is counted, so the
    /// step being run is `state`'s step count + 1. Returns the gradients' global norm when
    /// the update clipped them (a one-element tensor on the run's device, unread): it is
    /// read with the step's loss and checked by [`check_losses`](Self::check_losses), so
    /// clipping never waits for the device.
    fn update(state: &mut RunState<Self>, model: &mut Self::Model) -> Result<Option<Tensor>> {
        let norm = state.config().prepare_update(model)?;
        Self::apply_update(state, model)?;
        Ok(norm)
    }

    /// The part of the update that is a function of the gradients alone, the same at
    /// every step (a GPT's clipping; nothing by default): a CUDA graph captures it with
    /// the backward. Returns the norm it clipped to, if it clips.
    fn prepare_update(&self, model: &mut Self::Model) -> Result<Option<Tensor>> {
        let _ = model;
        Ok(None)
    }

    /// The rest of the update: the optimiser's step (at the schedule's rate for this
    /// step, for a run that has one).
    fn apply_update(state: &mut RunState<Self>, model: &mut Self::Model) -> Result<()>;

    /// What [`Run::set_cuda_graph`](super::Run::set_cuda_graph) captures of this run's
    /// step as a CUDA graph, or `None` (the default) when it cannot. The forward, the
    /// loss (cross-entropy against class indices) and the backward are always captured;
    /// so is [`prepare_update`](Self::prepare_update); [`apply_update`](Self::apply_update)
    /// is captured when it is the same at every step, and otherwise runs eagerly after
    /// each replay ([`GraphStep::update_in_graph`]).
    fn graph_step(&self) -> Option<GraphStep> {
        None
    }

    /// Checks the losses of steps `first, first + 1, ...` once they are on the host, with
    /// the gradient norm of each step whose update clipped; a run that must not go on
    /// after a non-finite loss or norm errors here, naming the step. The default accepts
    /// everything.
    fn check_losses(&self, first: u64, losses: &[f32], grad_norms: &[Option<f32>]) -> Result<()> {
        let _ = (first, losses, grad_norms);
        Ok(())
    }
}

/// `#[serde(with = "as_string")]`: a value written as its `Display` string and read with
/// `FromStr` (the seed, whose u64 a JSON reader that keeps numbers as f64 would round,
/// and the device, spelled `cpu` / `cuda:N`), as checkpoints have always stored them.
pub(crate) mod as_string {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{de, Deserialize, Deserializer, Serializer};

    /// Writes `value` as its `Display` string.
    pub fn serialize<T: Display, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(value)
    }

    /// Reads a string with `FromStr`; one that does not parse is an error naming it.
    pub fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        let text = String::deserialize(d)?;
        text.parse()
            .map_err(|e| de::Error::custom(format!("{text:?}: {e}")))
    }
}

/// The [`RunConfig`] methods that read and place a configuration's shared run settings,
/// its fields `seed`, `batch_size`, `device` and `num_workers`, which every kind of run
/// (the MLP's [`TrainConfig`](super::TrainConfig), the GPT's
/// [`GptTrainConfig`](crate::gpt::GptTrainConfig)) names and types alike: written once,
/// expanded inside each `impl RunConfig`. The fields themselves stay where they are, so
/// the configurations' struct literals and checkpoint JSON do not change.
macro_rules! run_settings {
    () => {
        fn seed(&self) -> u64 {
            self.seed
        }

        fn batch_size(&self) -> usize {
            self.batch_size
        }

        fn device(&self) -> tensor_core::Device {
            self.device
        }

        fn place(&mut self, device: tensor_core::Device, num_workers: usize) {
            self.device = device;
            self.num_workers = num_workers;
        }

        fn num_workers(&self) -> usize {
            self.num_workers
        }
    };
}
pub(crate) use run_settings;

/// What a CUDA graph holds of a run's step ([`RunConfig::graph_step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphStep {
    /// The loss is the mean cross-entropy of the output's last dimension, `classes`
    /// wide, against the targets' class indices (one per position of the output's other
    /// dimensions): the MLP's classes, or a GPT's vocabulary.
    pub classes: usize,
    /// [`RunConfig::apply_update`] is the same at every step (the MLP's SGD step) and is
    /// captured with the rest. When false it runs eagerly after each replay: a GPT's
    /// learning rate follows a schedule of the host's step count and AdamW's bias
    /// corrections change with it, which a captured launch would freeze.
    pub update_in_graph: bool,
}
