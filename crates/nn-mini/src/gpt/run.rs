//! The GPT run of `train_gpt` as a [`RunConfig`]: [`GptTrainConfig`] builds it (the
//! model, AdamW without decay on biases, layer norms and embeddings, random windows of
//! the text), its loss is next-token cross-entropy, and its update clips the gradients,
//! sets the scheduled learning rate and steps AdamW, stopping on the first non-finite
//! loss or gradient norm.

use std::sync::Arc;

use rng_gen::{fold_in, Generator, Key};
use tensor_core::Tensor;

use super::{Gpt, GptTrainConfig, Split, Text, TextWindows};
use crate::data::RankShare;
use crate::train::{
    run_settings, sharded_loader, FreshRun, GraphStep, RunConfig, RunState, TrainLoop, TrainingRun,
    DROPOUT_DOMAIN, INIT_DOMAIN,
};
use crate::{clip_grad_norm_, cross_entropy, AdamW, NnError, Result};

/// The GPT run of `train_gpt` ([`GptTrainConfig`]).
pub type GptTrainer = TrainLoop<GptTrainConfig>;

/// `cross_entropy` of logits `[rows, t, vocab]` against next tokens `[rows, t]`: the
/// mean over all `rows * t` positions, and its gradient shaped like the logits.
pub fn token_cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<(Tensor, Tensor)> {
    let dims = logits.dims().to_vec();
    let [rows, t, vocab] = dims[..] else {
        return Err(NnError::invalid(
            "token_cross_entropy",
            format!("logits must be [rows, t, vocab], got {dims:?}"),
        ));
    };
    if targets.dims() != [rows, t] {
        return Err(NnError::invalid(
            "token_cross_entropy",
            format!("targets must be [{rows}, {t}], got {:?}", targets.dims()),
        ));
    }
    let flat = logits.reshape(&[rows * t, vocab])?;
    let (loss, grad) = cross_entropy(&flat, &targets.reshape(&[rows * t])?)?;
    Ok((loss, grad.reshape(&dims)?))
}

/// Reads the text of `config.data`, checking it is the recorded one.
pub fn read_text(config: &GptTrainConfig) -> Result<Text> {
    let text = Text::read(&config.data.path)?;
    if text.bytes().len() as u64 != config.data.len || text.sha256() != config.data.sha256 {
        return Err(NnError::invalid(
            "GptTrainConfig",
            format!(
                "{} has {} bytes with SHA-256 {}, but the run trains on {} bytes with SHA-256 {}: \
                 give the run's own text",
                config.data.path,
                text.bytes().len(),
                text.sha256(),
                config.data.len,
                config.data.sha256
            ),
        ));
    }
    Ok(text)
}

impl RunConfig for GptTrainConfig {
    type Model = Gpt;

    const MODEL_KIND: &'static str = "gpt";

    run_settings!();

    /// The token ids stay on the host: the token embedding checks them there and uploads
    /// them once, with their sort for its backward.
    fn input_device(&self) -> tensor_core::Device {
        tensor_core::Device::Cpu
    }

    fn samples_per_epoch(&self) -> usize {
        usize::try_from(self.windows()).unwrap_or(usize::MAX)
    }

    fn validate(&self) -> Result<()> {
        GptTrainConfig::validate(self)
    }

    fn parameter_shapes(&self) -> Vec<(String, Vec<usize>)> {
        self.model.parameter_shapes()
    }

    /// The model from the `INIT_DOMAIN` stream, the dropout generator from
    /// `DROPOUT_DOMAIN`, AdamW, and the loader of the text's windows keyed by
    /// `LOADER_DOMAIN` (in order: each window's offset is already random).
    fn build(self, shard: Option<RankShare>) -> Result<FreshRun<Self>> {
        let run = Key::new(self.seed);
        let init = Generator::from_key(self.device, fold_in(run, INIT_DOMAIN));
        let dropout_generator = Generator::from_key(self.device, fold_in(run, DROPOUT_DOMAIN));
        let model = Gpt::new(&self.model, &init, &dropout_generator)?;
        let optimizer = AdamW::new(self.optimizer)?.without_decay(model.no_decay_names());
        let train = self.split_range(Split::Train);
        let windows = TextWindows::within(
            read_text(&self)?,
            train,
            self.context,
            self.samples_per_epoch(),
        )?;
        let loader = sharded_loader(Arc::new(windows), &self, shard, false, run)?;
        Ok(FreshRun {
            model,
            state: RunState::fresh(self, optimizer.into(), loader, dropout_generator),
        })
    }

    fn loss(&self, output: &Tensor, target: &Tensor) -> Result<(Tensor, Tensor)> {
        token_cross_entropy(output, target)
    }

    /// Clipping, whose norm stays on the device until the step's loss is read, where
    /// [`check_losses`](RunConfig::check_losses) stops the run on a non-finite one
    /// (nothing was scaled then; the update ran on the non-finite gradients, so the run
    /// cannot go on, and a checkpoint is refused).
    fn prepare_update(&self, model: &mut Gpt) -> Result<Option<Tensor>> {
        match self.grad_clip > 0.0 {
            true => Ok(Some(clip_grad_norm_(model, self.grad_clip)?)),
            false => Ok(None),
        }
    }

    /// The schedule's rate for this step, then AdamW.
    fn apply_update(state: &mut RunState<Self>, model: &mut Gpt) -> Result<()> {
        let step = state.step_count() + 1;
        let schedule = state.config().schedule();
        let optimizer = state.optimizer_mut();
        let adamw = optimizer.as_adamw_mut().ok_or_else(|| {
            NnError::invalid("GptTrainConfig::update", "a GPT run's optimiser is AdamW")
        })?;
        adamw.set_lr(schedule.lr_at(step - 1))?;
        optimizer.step(model)
    }

    /// Forward, token cross-entropy, backward and clipping are captured (the token ids
    /// staged in the embedding, the attention and residual masks drawn by the graph);
    /// the schedule's rate and AdamW run eagerly after each replay.
    fn graph_step(&self) -> Option<GraphStep> {
        Some(GraphStep {
            classes: self.model.vocab_size,
            update_in_graph: false,
        })
    }

    fn check_losses(&self, first: u64, losses: &[f32], grad_norms: &[Option<f32>]) -> Result<()> {
        for (i, &loss) in losses.iter().enumerate() {
            let step = first + i as u64;
            // The norm first: it was computed from the step's gradients, which a
            // non-finite loss makes non-finite too.
            if let Some(norm) = grad_norms
                .get(i)
                .copied()
                .flatten()
                .filter(|n| !n.is_finite())
            {
                return Err(NnError::NonFinite {
                    step,
                    what: "gradient norm",
                    value: f64::from(norm),
                });
            }
            if !loss.is_finite() {
                return Err(NnError::NonFinite {
                    step,
                    what: "loss",
                    value: f64::from(loss),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpt::DataSpec;

    /// The gradient norm travels with the loss and is checked first: a step whose norm
    /// is not finite stops the run there, named as the norm.
    #[test]
    fn a_non_finite_gradient_norm_stops_the_run_at_its_step() {
        let text = Text::from_bytes(b"some text".to_vec());
        let config = GptTrainConfig::tiny(DataSpec::of(std::path::Path::new("t.txt"), &text));
        assert!(config
            .check_losses(4, &[2.0, 1.5], &[Some(0.5), None])
            .is_ok());
        let err = config
            .check_losses(4, &[2.0, f32::NAN], &[Some(0.5), Some(f32::INFINITY)])
            .unwrap_err();
        assert!(
            matches!(
                err,
                NnError::NonFinite {
                    step: 5,
                    what: "gradient norm",
                    ..
                }
            ),
            "{err}"
        );
        let err = config
            .check_losses(4, &[f32::NAN], &[Some(1.0)])
            .unwrap_err();
        assert!(
            matches!(
                err,
                NnError::NonFinite {
                    step: 4,
                    what: "loss",
                    ..
                }
            ),
            "{err}"
        );
    }
}
