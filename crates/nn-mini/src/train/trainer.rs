//! `TrainLoop`: the single-process training loop of `examples/train_resume.rs` (the
//! MLP, [`Trainer`]) and `examples/train_gpt.rs` (the GPT, [`GptTrainer`]), resumable
//! bit for bit.
//!
//! [`GptTrainer`]: crate::gpt::GptTrainer

use std::path::Path;

use tensor_core::{DType, Device};

#[cfg(feature = "cuda")]
use super::graphed_step::GraphedStep;
use super::pending_losses::PendingLosses;
use super::run_state::{config_of, read_history};
use super::{placed, FreshRun, Run, RunConfig, RunState, TrainConfig, TrainingRun};
use crate::{Checkpoint, Module, NnError, Result};

/// The MLP run of `train_resume` ([`TrainConfig`]).
pub type Trainer = TrainLoop<TrainConfig>;

/// A whole training run of any kind ([`RunConfig`]): model, optimiser, data loader,
/// dropout generator, step counter and loss history, driven through [`Run`]:
/// [`step`](Self::step) runs one training step; [`checkpoint`](Self::checkpoint)
/// captures all of it;
/// [`from_checkpoint`](Self::from_checkpoint) rebuilds a loop whose next step is
/// bit-identical to the one the saved loop would have run. Its step count, losses,
/// configuration, loader and dropout generator are read through [`TrainingRun`] (`use
/// nn_mini::train::TrainingRun`). Use it through its kinds: [`Trainer`] (the MLP) and
/// [`GptTrainer`](crate::gpt::GptTrainer).
pub struct TrainLoop<C: RunConfig> {
    model: C::Model,
    /// Everything else of the run; its losses are those read to the host.
    state: RunState<C>,
    /// Losses of the latest steps, still on the device.
    pending: PendingLosses,
    /// Whether steps run as a replayed CUDA graph ([`Trainer::set_cuda_graph`]).
    use_cuda_graph: bool,
    /// The captured steps, one per batch size seen.
    #[cfg(feature = "cuda")]
    graphed: Vec<GraphedStep>,
}

impl<C: RunConfig> std::fmt::Debug for TrainLoop<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrainLoop")
            .field("config", self.config())
            .field("step", &self.step_count())
            .finish()
    }
}

impl<C: RunConfig> TrainingRun for TrainLoop<C> {
    type Config = C;

    fn run_state(&self) -> &RunState<C> {
        &self.state
    }
}

impl<C: RunConfig> TrainLoop<C> {
    /// A fresh run at step 0 ([`FreshRun::new`]: everything from the configuration's
    /// seed, nothing from the process-wide default generators).
    pub fn new(config: C) -> Result<Self> {
        let FreshRun { model, state } = FreshRun::new(config, None)?;
        Ok(TrainLoop {
            model,
            state,
            pending: PendingLosses::default(),
            use_cuda_graph: false,
            #[cfg(feature = "cuda")]
            graphed: Vec::new(),
        })
    }

    /// Whether a step has been captured already.
    fn has_graphs(&self) -> bool {
        #[cfg(feature = "cuda")]
        return !self.graphed.is_empty();
        #[cfg(not(feature = "cuda"))]
        false
    }

    /// Without the `cuda` feature no run is on a CUDA device, so `set_cuda_graph(true)`
    /// was refused and this is never reached; it errors rather than panics all the same.
    #[cfg(not(feature = "cuda"))]
    fn step_graphed(
        &mut self,
        _input: &tensor_core::Tensor,
        _target: &tensor_core::Tensor,
    ) -> Result<()> {
        Err(crate::NnError::invalid(
            "Trainer::step",
            "CUDA graphs need the `cuda` feature, which this build lacks",
        ))
    }

    /// One step through the captured graph (capturing it first if needed): the batch
    /// into its buffers, one replay, the update when the graph does not hold it, the
    /// loss (and the gradient norm) into the pending buffer.
    #[cfg(feature = "cuda")]
    fn step_graphed(
        &mut self,
        input: &tensor_core::Tensor,
        target: &tensor_core::Tensor,
    ) -> Result<()> {
        let config = self.config();
        let (device, staged) = (config.device(), config.input_device() == Device::Cpu);
        let step = config.graph_step().ok_or_else(|| {
            crate::NnError::invalid(
                "TrainLoop::set_cuda_graph",
                format!(
                    "a {} run's step cannot be captured as a CUDA graph",
                    C::MODEL_KIND
                ),
            )
        })?;
        let rows = input.dims().first().copied().unwrap_or(0);
        let at = match self.graphed.iter().position(|g| g.rows() == rows) {
            Some(at) => {
                self.graphed[at].feed(&mut self.model, input, target)?;
                at
            }
            None => {
                let state = &mut self.state;
                let captured = GraphedStep::capture(
                    device,
                    &mut self.model,
                    (input, target),
                    (step, staged),
                    |model| {
                        let norm = state.config().prepare_update(model)?;
                        if step.update_in_graph {
                            C::apply_update(state, model)?;
                        }
                        Ok(norm)
                    },
                )?;
                self.graphed.push(captured);
                self.graphed.len() - 1
            }
        };
        let (loss, norm) = self.graphed[at].run(&mut self.model)?;
        let (loss, norm) = (loss.clone(), norm.cloned());
        if !step.update_in_graph {
            C::apply_update(&mut self.state, &mut self.model)?;
        }
        self.pending.push(&loss, norm.as_ref())?;
        self.state.count_step();
        Ok(())
    }

    /// The configuration stored in a checkpoint (to inspect or adjust before
    /// [`from_checkpoint`](Self::from_checkpoint)).
    /// Errors (naming both kinds) when `ck` is not a checkpoint of this kind of run.
    pub fn config_of(ck: &Checkpoint) -> Result<C> {
        config_of::<C>(ck)
    }

    /// Rebuilds the saved run. `num_workers` and `device`, when given, replace the saved
    /// ones (neither changes results); every other setting comes from the checkpoint.
    /// Restores parameters, the optimiser's state, the dropout generator, the default
    /// generators of the devices the run uses (the CPU, and its GPU on a CUDA run), the
    /// loader position, the step and the loss history.
    ///
    /// Before anything is allocated or changed, what can be cross-checked is: the model
    /// tensors' shapes against the configuration's layers (a crafted `layers` cannot make
    /// it allocate a huge model), the loss history's length against the step, the loader
    /// state's key against the one the configuration's seed derives and its position
    /// against the step, and the optimiser's kind and state against the model's
    /// parameters (all of them once a step has run, none before). Each mismatch is a
    /// [`CheckpointError::Inconsistent`](crate::CheckpointError::Inconsistent) (or the shape / missing-tensor error) naming
    /// the entry.
    pub fn from_checkpoint(
        ck: &Checkpoint,
        num_workers: Option<usize>,
        device: Option<Device>,
    ) -> Result<Self> {
        TrainLoop::from_checkpoint_in(ck, &(), &mut placed(device, num_workers))
    }

    /// [`from_checkpoint`](Self::from_checkpoint) from a file.
    pub fn resume(
        path: impl AsRef<Path>,
        num_workers: Option<usize>,
        device: Option<Device>,
    ) -> Result<Self> {
        TrainLoop::from_checkpoint(&Checkpoint::load(path)?, num_workers, device)
    }
}

impl<C: RunConfig> Run for TrainLoop<C> {
    type Error = NnError;
    /// One process: nothing to say beyond the configuration.
    type Place = ();

    /// A fresh run at step 0 ([`FreshRun::new`]: everything from the configuration's
    /// seed, nothing from the process-wide default generators).
    fn fresh(config: C, _: &()) -> Result<Self> {
        TrainLoop::new(config)
    }

    /// The checks that follow `adjust` hold the adjusted configuration to the
    /// checkpoint (see [`from_checkpoint`](TrainLoop::from_checkpoint)).
    fn from_checkpoint_in(ck: &Checkpoint, _: &(), adjust: &mut dyn FnMut(&mut C)) -> Result<Self> {
        let mut config = config_of::<C>(ck)?;
        adjust(&mut config);
        let history = read_history(ck, &config)?;
        let mut trainer = TrainLoop::new(config)?;
        trainer.state.restore(ck, &mut trainer.model, history)?;
        Ok(trainer)
    }

    /// [`step`](Self::step) without reading the loss: it stays on the device (one slot
    /// of a buffer there) until [`read_losses`](Self::read_losses), so on a GPU nothing
    /// in the step waits for the device. After [`LOSS_SLOTS`](super::LOSS_SLOTS) unread
    /// steps the pending losses are read first.
    fn step_deferred(&mut self) -> Result<()> {
        if self.pending.is_full() {
            self.read_losses()?;
        }
        let batch = self.state.loader_mut().next_batch()?;
        if self.use_cuda_graph && (self.has_graphs() || self.step_count() > 0) {
            return self.step_graphed(&batch.input, &batch.target);
        }
        let input = batch.input.to_device(self.config().input_device())?;
        // The targets stay on the host: cross_entropy checks them there and uploads them
        // once (the step's second and last upload).
        let target = batch.target;
        self.model.zero_grad();
        let output = self.model.forward(&input, true)?;
        let (loss, grad) = self.state.config().loss(&output, &target)?;
        self.model.backward_params(&grad)?;
        let grad_norm = C::update(&mut self.state, &mut self.model)?;
        self.pending
            .push(&loss.to_dtype(DType::F32)?, grad_norm.as_ref())?;
        self.state.count_step();
        Ok(())
    }

    /// Runs this and every later step as a replayed CUDA graph (`true`) or eagerly. The
    /// step is captured at the first step once the optimizer's state exists (after one
    /// eager step of a fresh run; at once after a resume), then replayed: one graph
    /// launch per step, the losses bit-identical to eager steps (see
    /// `train::graphed_step`). Errors on a CPU run, and for a kind of run whose step a
    /// graph cannot hold ([`RunConfig::graph_step`]).
    fn set_cuda_graph(&mut self, on: bool) -> Result<()> {
        let device = self.config().device();
        if on && !device.is_cuda() {
            return Err(crate::NnError::invalid(
                "Trainer::set_cuda_graph",
                format!("CUDA graphs need a CUDA device, the run is on {device}"),
            ));
        }
        if on && self.config().graph_step().is_none() {
            return Err(crate::NnError::invalid(
                "Trainer::set_cuda_graph",
                format!(
                    "a {} run's step is not one a CUDA graph can hold; train it eagerly",
                    C::MODEL_KIND
                ),
            ));
        }
        self.use_cuda_graph = on;
        #[cfg(feature = "cuda")]
        if !on {
            self.graphed.clear();
        }
        Ok(())
    }

    /// Reads the losses of the steps run since the last read to the host, in one copy,
    /// appends them to [`losses`](TrainingRun::losses) and returns them (oldest first).
    /// A run that stops on a non-finite loss ([`RunConfig::check_losses`]) errors here,
    /// naming the first step whose loss was not finite.
    fn read_losses(&mut self) -> Result<&[f32]> {
        let (losses, grad_norms) = self.pending.take()?;
        let first = self.state.losses().len() as u64 + 1;
        self.state
            .config()
            .check_losses(first, &losses, &grad_norms)?;
        Ok(self.state.record_losses(losses))
    }

    /// Steps whose losses are still on the device, unread.
    fn unread_losses(&self) -> usize {
        self.pending.len()
    }

    /// The model.
    fn model(&self) -> &C::Model {
        &self.model
    }

    /// The model, mutably: to evaluate or sample from it between steps (a forward
    /// with `train = false` draws nothing and leaves the run unchanged).
    fn model_mut(&mut self) -> &mut C::Model {
        &mut self.model
    }

    /// Everything needed to continue: parameters (`model.*`), the optimiser and its
    /// state (`optim.*`), the dropout generator and the default generators of the devices in
    /// use (`rng.*`), the loader position (`loader.state`), the step (`train.step`), the
    /// loss history (`train.loss_history`) and the configuration (`train.config`).
    fn checkpoint(&self) -> Result<Checkpoint> {
        // Losses still on the device are part of the history (read without consuming);
        // a run that must stop on a non-finite one is not saved.
        let (losses, grad_norms) = self.pending.peek()?;
        let first = self.state.losses().len() as u64 + 1;
        self.state
            .config()
            .check_losses(first, &losses, &grad_norms)?;
        self.state.checkpoint(&self.model, &losses)
    }

    fn placement(&self) -> String {
        let device = self.config().device();
        match device {
            // The driver's name, so that a run on the host-executed CUDA stand-in
            // (docs/cuda-standin.md) never passes for a GPU run.
            Device::Cuda(ordinal) => match tensor_core::cuda::get_device_name(ordinal) {
                Ok(name) => format!("{device}: {name}"),
                Err(e) => format!("{device}: {e}"),
            },
            Device::Cpu => device.to_string(),
        }
    }
}
