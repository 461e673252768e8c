//! `DdpLoop`: the training loops of `examples/train_resume.rs` and
//! `examples/train_gpt.rs`, data parallel ([`DdpTrainer`] for the MLP, [`GptDdpTrainer`]
//! for the GPT).
//!
//! The same run as [`nn_mini::train::TrainLoop`] (model, data, every random number
//! derived from the seed as described there), with each global batch of `batch_size`
//! rows spread over the ranks of a [`ProcessGroup`]:
//!
//! - each rank's loader loads its share of the single process's batches: in fast mode
//!   through a [`DistributedSampler`] (local row `j` of rank `r` is global row
//!   `j * W + r`), in invariant mode through a [`MicroShardSampler`] (the rows of the
//!   micro-shards the rank holds, [`tree::shards_of_rank`], at any world size up to the
//!   shard count; ranks may hold different numbers of rows);
//! - the model is wrapped in [`DistributedDataParallel`]: parameters start from rank 0's,
//!   dropout draws each row at its global position, gradients are summed in the chosen
//!   [`ReduceMode`];
//! - every rank takes the same update (the run's [`RunConfig::update`]: SGD, or for the
//!   GPT clipping, the schedule and AdamW), so models, optimiser buffers and generators stay
//!   identical on all ranks, and a checkpoint (written once, by rank 0) holds what every
//!   rank needs. In invariant mode it resumes on another world size with the same curve.
//!
//! At world size 1 in fast mode the run is the single-process [`TrainLoop`]'s, bit for
//! bit (the weights `rows / batch` are exactly 1 and a one-rank sum is the identity).
//!
//! [`TrainLoop`]: nn_mini::train::TrainLoop

mod checkpoint;
mod run;

pub use checkpoint::{MAX_CHECKPOINT_BYTES, MODE_KEY, WORLD_SIZE_KEY};
pub use run::DdpPlace;

use std::sync::Arc;

use nn_mini::data::{DistributedSampler, MicroShardSampler, RankShare};
use nn_mini::gpt::GptTrainConfig;
use nn_mini::train::{FreshRun, RunConfig, RunState, TrainConfig, TrainingRun};

use crate::ddp::tree;
use crate::{DdpConfig, DistError, DistributedDataParallel, ProcessGroup, ReduceMode, Result};

/// Checks that `W` ranks of the fast mode cut every epoch into the single process's
/// batches: the same number per epoch, so positions, and checkpoints, carry over
/// between world sizes. (The invariant mode loads the single process's batches
/// themselves, [`MicroShardSampler`].)
fn check_epoch_layout<C: RunConfig>(config: &C, sampler: &DistributedSampler) -> Result<()> {
    let (n, world, batch) = (
        config.samples_per_epoch(),
        sampler.num_replicas(),
        config.batch_size(),
    );
    let single = n.div_ceil(batch);
    let sharded = sampler.num_samples(n).div_ceil(batch / world);
    if single != sharded {
        return Err(DistError::invalid(
            "DdpTrainer::new",
            format!(
                "{world} ranks would pad the {n} samples of an epoch to {} ({sharded} batches per epoch, \
                 one process makes {single}): use a dataset size that divides by the world size",
                sampler.total_size(n)
            ),
        ));
    }
    Ok(())
}

/// In invariant mode every rank must hold a row of every batch, the short last one of
/// an epoch included (a rank with no rows would have nothing to load). Every rank
/// checks every rank, so all of them fail alike, before any collective.
fn check_no_empty_rank<C: RunConfig>(config: &C, micro_shards: usize, world: usize) -> Result<()> {
    let (n, batch) = (config.samples_per_epoch(), config.batch_size());
    let shortest = match n % batch {
        0 => batch.min(n),
        tail => tail,
    };
    for rank in 0..world {
        let shards = tree::shards_of_rank(rank, world, micro_shards);
        let lowest = shards.iter().copied().min().unwrap_or(0);
        if lowest >= shortest {
            return Err(DistError::invalid(
                "DdpTrainer::new",
                format!(
                    "rank {rank} of {world} holds the micro-shards {shards:?} of {micro_shards}, but \
                     the last batch of an epoch of {n} samples has {shortest} rows (batches of \
                     {batch}), none of them in those shards: use fewer ranks or a dataset size \
                     that leaves a last batch of at least {} rows",
                    lowest + 1
                ),
            ));
        }
    }
    Ok(())
}

/// The MLP run of `train_resume`, data parallel ([`TrainConfig`]).
pub type DdpTrainer = DdpLoop<TrainConfig>;

/// The GPT run of `train_gpt`, data parallel ([`GptTrainConfig`]).
pub type GptDdpTrainer = DdpLoop<GptTrainConfig>;

/// A data parallel training run of any kind ([`RunConfig`]) on one rank. Its step
/// count, losses, configuration (`batch_size` is the global batch), loader (this rank's
/// share) and dropout generator (in lockstep on every rank) are read through
/// [`TrainingRun`] (`use nn_mini::train::TrainingRun`).
pub struct DdpLoop<C: RunConfig> {
    mode: ReduceMode,
    ddp: DistributedDataParallel<C::Model>,
    /// Everything else of the run, the same on every rank but the loader's share.
    state: RunState<C>,
    /// Steps whose losses [`Run::read_losses`](nn_mini::train::Run::read_losses) has
    /// not returned yet (each step reads its loss: the collectives waited anyway).
    unread: usize,
}

impl<C: RunConfig> TrainingRun for DdpLoop<C> {
    type Config = C;

    fn run_state(&self) -> &RunState<C> {
        &self.state
    }
}

impl<C: RunConfig> std::fmt::Debug for DdpLoop<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DdpLoop")
            .field("config", self.config())
            .field("mode", &self.mode)
            .field("rank", &self.ddp.group().rank())
            .field("world_size", &self.ddp.group().world_size())
            .field("step", &self.step_count())
            .finish()
    }
}

impl<C: RunConfig> DdpLoop<C> {
    /// A fresh run at step 0 on this rank. A collective: every rank of `group` calls it
    /// with the same configuration. The configuration's batch size is the global batch.
    /// In fast mode it must divide by the world size; in invariant mode the world size
    /// must be at most the micro-shard count (any batch and dataset size).
    pub fn new(config: C, mode: ReduceMode, group: Arc<dyn ProcessGroup>) -> Result<Self> {
        const OP: &str = "DdpTrainer::new";
        config.validate()?;
        let (world, rank) = (group.world_size(), group.rank());
        let share: RankShare = match mode {
            ReduceMode::Invariant { micro_shards } => {
                tree::check_layout(micro_shards, world)?;
                check_no_empty_rank(&config, micro_shards, world)?;
                let shards = tree::shards_of_rank(rank, world, micro_shards);
                MicroShardSampler::new(micro_shards, &shards)?.into()
            }
            ReduceMode::Fast => {
                if !config.batch_size().is_multiple_of(world) {
                    return Err(DistError::invalid(
                        OP,
                        format!(
                            "the global batch of {} rows does not divide among {world} ranks",
                            config.batch_size()
                        ),
                    ));
                }
                let sampler = DistributedSampler::new(world, rank)?;
                check_epoch_layout(&config, &sampler)?;
                sampler.into()
            }
        };
        // The single process's run, its loader cut down to this rank's share.
        let FreshRun { model, state } = FreshRun::new(config, Some(share))?;
        let ddp = DistributedDataParallel::new(model, group, DdpConfig::new(mode))?;
        Ok(DdpLoop {
            mode,
            ddp,
            state,
            unread: 0,
        })
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
}
