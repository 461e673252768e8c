//! `RankShare`: which share of every batch a data parallel rank's loader loads, the one
//! thing a training run built for a rank changes in its loader.

use super::{DataLoaderBuilder, DistributedSampler, MicroShardSampler};

/// A rank's share of every batch of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RankShare {
    /// PyTorch's round-robin dealing: local batches of `batch / W` rows.
    Replicas(DistributedSampler),
    /// Whole micro-shards of the single process's batches (any world size up to the
    /// shard count; ranks may hold different numbers of rows).
    MicroShards(MicroShardSampler),
}

impl From<DistributedSampler> for RankShare {
    fn from(sampler: DistributedSampler) -> Self {
        RankShare::Replicas(sampler)
    }
}

impl From<MicroShardSampler> for RankShare {
    fn from(sampler: MicroShardSampler) -> Self {
        RankShare::MicroShards(sampler)
    }
}

impl RankShare {
    /// The loader's batch size for a run whose batches have `global_batch` rows.
    #[must_use]
    pub fn batch_size(&self, global_batch: usize) -> usize {
        match self {
            RankShare::Replicas(sampler) => global_batch / sampler.num_replicas(),
            RankShare::MicroShards(_) => global_batch,
        }
    }

    /// `builder` loading this share.
    #[must_use]
    pub fn apply(self, builder: DataLoaderBuilder) -> DataLoaderBuilder {
        match self {
            RankShare::Replicas(sampler) => builder.sampler(sampler),
            RankShare::MicroShards(sampler) => builder.micro_shard_sampler(sampler),
        }
    }
}
