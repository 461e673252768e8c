//! `DdpTrainer`: the training loop of `examples/train_resume.rs`, data parallel.
//!
//! The same run as [`nn_mini::train::Trainer`] (model, data, every random number derived
//! from the seed as described there), with each global batch of `batch_size` rows spread
//! over the ranks of a [`ProcessGroup`]:
//!
//! - each rank's loader loads its share through a [`DistributedSampler`], so the ranks
//!   together load the single process's batches, and local row `j` of rank `r` is
//!   global row `j * W + r`;
//! - the model is wrapped in [`DistributedDataParallel`]: parameters start from rank 0's,
//!   dropout draws each row at its global position, gradients are summed in the chosen
//!   [`ReduceMode`];
//! - every rank takes the same SGD step, so models, optimiser buffers and generators stay
//!   identical on all ranks, and a checkpoint (written once, by rank 0) holds what every
//!   rank needs. In invariant mode it resumes on another world size with the same curve.
//!
//! At world size 1 in fast mode the run is the single-process [`Trainer`]'s, bit for bit
//! (the weights `rows / batch` are exactly 1 and a one-rank sum is the identity).
//!
//! [`Trainer`]: nn_mini::train::Trainer

mod checkpoint;
mod latest;

pub use checkpoint::{MAX_CHECKPOINT_BYTES, MODE_KEY, WORLD_SIZE_KEY};
pub use latest::ResumedLatest;

use std::sync::Arc;

use nn_mini::data::DistributedSampler;
use nn_mini::train::{FreshRun, RunState, TrainConfig, TrainingRun};
use nn_mini::{cross_entropy, Sequential};
use tensor_core::DType;

use crate::ddp::tree;
use crate::{
    DdpConfig, DistError, DistributedDataParallel, LocalRows, ProcessGroup, ReduceMode, Result,
};

/// Checks that `W` ranks cut every epoch into the single process's batches: the same
/// number per epoch (so positions, and checkpoints, carry over between world sizes) and,
/// in invariant mode, no padding (PyTorch pads an epoch that does not divide by the
/// world size with repeated samples, which a single process does not see).
fn check_epoch_layout(
    config: &TrainConfig,
    sampler: &DistributedSampler,
    mode: ReduceMode,
) -> Result<()> {
    let (n, world) = (config.dataset_size, sampler.num_replicas());
    let single = n.div_ceil(config.batch_size);
    let sharded = sampler.num_samples(n).div_ceil(config.batch_size / world);
    let padded = !n.is_multiple_of(world) && matches!(mode, ReduceMode::Invariant { .. });
    if single != sharded || padded {
        return Err(DistError::invalid(
            "DdpTrainer::new",
            format!(
                "{world} ranks would pad the {n} samples of an epoch to {} ({sharded} batches per epoch,                  one process makes {single}): use a dataset size that divides by the world size",
                sampler.total_size(n)
            ),
        ));
    }
    Ok(())
}

/// A data parallel training run on one rank. Its step count, losses, configuration
/// (`batch_size` is the global batch), loader (this rank's share) and dropout generator
/// (in lockstep on every rank) are read through [`TrainingRun`]
/// (`use nn_mini::train::TrainingRun`).
pub struct DdpTrainer {
    mode: ReduceMode,
    ddp: DistributedDataParallel<Sequential>,
    /// Everything else of the run, the same on every rank but the loader's share.
    state: RunState,
}

impl TrainingRun for DdpTrainer {
    fn run_state(&self) -> &RunState {
        &self.state
    }
}

impl std::fmt::Debug for DdpTrainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DdpTrainer")
            .field("config", self.config())
            .field("mode", &self.mode)
            .field("rank", &self.ddp.group().rank())
            .field("world_size", &self.ddp.group().world_size())
            .field("step", &self.step_count())
            .finish()
    }
}

impl DdpTrainer {
    /// A fresh run at step 0 on this rank. A collective: every rank of `group` calls it
    /// with the same configuration. `config.batch_size` is the global batch; it must
    /// divide by the world size, and in invariant mode the world size must be a power
    /// of two dividing the micro-shard count.
    pub fn new(
        config: TrainConfig,
        mode: ReduceMode,
        group: Arc<dyn ProcessGroup>,
    ) -> Result<Self> {
        const OP: &str = "DdpTrainer::new";
        config.validate()?;
        let (world, rank) = (group.world_size(), group.rank());
        if !config.batch_size.is_multiple_of(world) {
            return Err(DistError::invalid(
                OP,
                format!(
                    "the global batch of {} rows does not divide among {world} ranks",
                    config.batch_size
                ),
            ));
        }
        if let ReduceMode::Invariant { micro_shards } = mode {
            tree::check_layout(micro_shards, world)?;
        }
        let sampler = DistributedSampler::new(world, rank)?;
        check_epoch_layout(&config, &sampler, mode)?;
        // The single process's run, its loader cut down to this rank's share.
        let FreshRun { model, state } = FreshRun::new(config, Some(sampler))?;
        let ddp = DistributedDataParallel::new(model, group, DdpConfig::new(mode))?;
        Ok(DdpTrainer { mode, ddp, state })
    }

    /// One step on this rank's rows of the next global batch: forward (dropout on),
    /// cross-entropy, backward, gradients summed across ranks, SGD. A collective.
    /// Returns the global batch's loss (the same on every rank), also appended to the
    /// history.
    pub fn step(&mut self) -> Result<f32> {
        let batch = self.state.loader_mut().next_batch()?;
        let device = self.config().device;
        let input = batch.input.to_device(device)?;
        let target = batch.target.to_device(device)?;
        let sampler = *self.loader().sampler().expect("built with a sampler");
        let rows: Vec<u64> = (0..batch.indices.len())
            .map(|j| sampler.global_row(j) as u64)
            .collect();
        let local = LocalRows {
            input: &input,
            target: &target,
            rows: &rows,
            // Every rank loads as many rows as the others (the sampler pads the epoch).
            batch_rows: (batch.indices.len() * sampler.num_replicas()) as u64,
        };
        let loss = self.ddp.forward_backward(local, cross_entropy)?;
        self.state.optimizer_mut().step(self.ddp.module_mut())?;
        let loss = loss.to_dtype(DType::F32)?.to_vec::<f32>()?[0];
        self.state.count_step();
        self.state.record_losses([loss]);
        Ok(loss)
    }

    /// How gradients are summed.
    #[must_use]
    pub fn mode(&self) -> ReduceMode {
        self.mode
    }

    /// The process group.
    #[must_use]
    pub fn group(&self) -> &Arc<dyn ProcessGroup> {
        self.ddp.group()
    }

    /// The model replica.
    #[must_use]
    pub fn model(&self) -> &Sequential {
        self.ddp.module()
    }
}
