//! The options a built loader runs with, shared by the builder that checks them and the
//! loader that runs with them. They live in a file of their own so that the builder
//! depends on the loader (it starts one) and neither depends back on the other.

use std::sync::Arc;

use super::{Dataset, DistributedSampler, MicroShardSampler};

/// The options a built loader runs with (checked by [`DataLoaderBuilder::build`](super::DataLoaderBuilder::build)).
pub(super) struct Settings {
    pub dataset: Arc<dyn Dataset>,
    /// `dataset.len()`, read once: a dataset whose length changed later could
    /// otherwise move positions past the end of an epoch's order.
    pub len: usize,
    pub batch_size: usize,
    pub shuffle: bool,
    pub drop_last: bool,
    pub num_workers: usize,
    pub prefetch_factor: usize,
    pub in_order: bool,
    pub sampler: Option<DistributedSampler>,
    /// At most one of `sampler` and this is set.
    pub micro_shards: Option<MicroShardSampler>,
}

/// Batches of an epoch: `len / batch_size` when dropping the last partial batch,
/// `ceil(len / batch_size)` otherwise.
pub(super) fn batches_per_epoch(len: usize, batch_size: usize, drop_last: bool) -> usize {
    if drop_last {
        len / batch_size
    } else {
        len.div_ceil(batch_size)
    }
}
