//! `DataLoader`: batches in a reproducible order, loaded by worker threads, delivered in
//! order, resumable mid-epoch.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rng_gen::Key;

use super::batch::{load_batch_guarded, Batch};
use super::order::{EpochOrder, OrderCache};
use super::settings::{batches_per_epoch, Settings};
use super::workers::{Job, WorkerPool};
use super::{Dataset, DistributedSampler, LoaderState, MicroShardSampler};
use crate::{NnError, Result};

/// Batches over a [`Dataset`], reproducibly: which samples form batch `b` of epoch `e`,
/// and every random number their loading draws, depend only on the loader's key, `e`,
/// `b` and the sample indices (see [`crate::data`]). Not on `num_workers`, not on
/// timing, not on how many batches were drawn before a checkpoint.
///
/// [`next_batch`](Self::next_batch) is an endless stream that rolls over from one epoch
/// to the next; [`iter_epoch`](Self::iter_epoch) walks what is left of the current one.
/// [`state`](Self::state) / [`set_state`](Self::set_state) save and restore the position,
/// mid-epoch included.
pub struct DataLoader {
    dataset: Arc<dyn Dataset>,
    /// The dataset's length when the loader was built.
    len: usize,
    /// This rank's share of each epoch, when loading for data parallel training.
    sampler: Option<DistributedSampler>,
    /// This rank's micro-shards of each (global) batch, instead of `sampler`.
    micro_shards: Option<MicroShardSampler>,
    batch_size: usize,
    shuffle: bool,
    drop_last: bool,
    num_workers: usize,
    prefetch_factor: usize,
    /// False only with workers and `in_order(false)`: deliver in arrival order.
    in_order: bool,
    key: Key,
    /// Epoch of the next batch to deliver. `u64::MAX` means every epoch has been
    /// delivered (see [`DataLoader::next_batch`]).
    epoch: u64,
    /// Index within `epoch` of the next batch to deliver.
    position: u64,
    orders: OrderCache,
    pool: Option<WorkerPool>,
    pipeline: Pipeline,
}

impl std::fmt::Debug for DataLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataLoader")
            .field("state", &self.state().ok())
            .field("num_workers", &self.num_workers)
            .finish()
    }
}

/// Bookkeeping of the batches handed to workers. Tickets count batches from the point
/// the pipeline (re)started; delivery takes them strictly in ticket order.
struct Pipeline {
    generation: u64,
    dispatch_epoch: u64,
    dispatch_position: u64,
    dispatched: u64,
    /// Tickets below this have all been delivered (in-order delivery keeps every
    /// delivered ticket below it; `epoch` / `position` describe this prefix).
    delivered: u64,
    /// Out-of-order delivery only: tickets delivered ahead of the prefix.
    delivered_ahead: BTreeSet<u64>,
    /// Loaded batches that arrived before their turn.
    ready: BTreeMap<u64, Result<Batch>>,
}

impl Pipeline {
    fn at(generation: u64, epoch: u64, position: u64) -> Self {
        Pipeline {
            generation,
            dispatch_epoch: epoch,
            dispatch_position: position,
            dispatched: 0,
            delivered: 0,
            delivered_ahead: BTreeSet::new(),
            ready: BTreeMap::new(),
        }
    }
}

impl DataLoader {
    /// A loader at epoch 0, batch 0 (called by [`DataLoaderBuilder::build`](super::DataLoaderBuilder::build)).
    pub(super) fn start(settings: Settings, key: Key, pool: Option<WorkerPool>) -> Self {
        let mut loader = DataLoader {
            dataset: settings.dataset,
            len: settings.len,
            sampler: settings.sampler,
            micro_shards: settings.micro_shards,
            batch_size: settings.batch_size,
            shuffle: settings.shuffle,
            drop_last: settings.drop_last,
            num_workers: settings.num_workers,
            prefetch_factor: settings.prefetch_factor,
            in_order: settings.in_order,
            key,
            epoch: 0,
            position: 0,
            orders: OrderCache::default(),
            pool,
            pipeline: Pipeline::at(0, 0, 0),
        };
        loader.restart_pipeline();
        loader
    }

    /// Batches per epoch.
    #[must_use]
    pub fn batches_per_epoch(&self) -> usize {
        let positions = self.sampler.map_or(self.len, |s| s.num_samples(self.len));
        batches_per_epoch(positions, self.batch_size, self.drop_last)
    }

    /// The distributed sampler this loader loads through, if any.
    #[must_use]
    pub fn sampler(&self) -> Option<&DistributedSampler> {
        self.sampler.as_ref()
    }

    /// The micro-shard sampler this loader loads through, if any.
    #[must_use]
    pub fn micro_shard_sampler(&self) -> Option<&MicroShardSampler> {
        self.micro_shards.as_ref()
    }

    /// Rows in the whole batch at `position` of an epoch (for a loader with a sampler,
    /// all ranks' rows together): the batch size, less for a short last batch.
    #[must_use]
    pub fn global_batch_rows(&self, position: u64) -> usize {
        let per_rank = self.sampler.map_or(self.len, |s| s.num_samples(self.len));
        let ranks = self.sampler.map_or(1, |s| s.num_replicas());
        let start = usize::try_from(position)
            .unwrap_or(usize::MAX)
            .saturating_mul(self.batch_size);
        per_rank.saturating_sub(start).min(self.batch_size) * ranks
    }

    /// The epoch of the next batch.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Index within the epoch of the next batch.
    #[must_use]
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The root key everything random in the loader derives from.
    #[must_use]
    pub fn key(&self) -> Key {
        self.key
    }

    /// Worker threads in use.
    #[must_use]
    pub fn num_workers(&self) -> usize {
        self.num_workers
    }

    /// Where the loader is, for a checkpoint.
    ///
    /// Errors only for an `in_order(false)` loader that has delivered a batch ahead of
    /// one still loading: the batches handed out are then not the first `position` of
    /// the epoch, and no `(epoch, position)` could describe them truthfully.
    pub fn state(&self) -> Result<LoaderState> {
        if !self.pipeline.delivered_ahead.is_empty() {
            return Err(NnError::invalid(
                "DataLoader::state",
                format!(
                    "with in_order(false), {} batch(es) were delivered ahead of batch {} of \
                     epoch {}, which is still loading; build the loader with in_order(true) \
                     to checkpoint it",
                    self.pipeline.delivered_ahead.len(),
                    self.position,
                    self.epoch
                ),
            ));
        }
        Ok(LoaderState {
            key: self.key,
            epoch: self.epoch,
            position: self.position,
            dataset_len: self.len as u64,
            batch_size: self.batch_size as u64,
            shuffle: self.shuffle,
            drop_last: self.drop_last,
        })
    }

    /// Continues from `state`: the next batch is the one the saved loader would have
    /// delivered next. Batches already prefetched are discarded. Errors (and changes
    /// nothing) when the state was taken from a loader with another dataset length,
    /// batch size, shuffle or drop_last, or points past the end of an epoch.
    pub fn set_state(&mut self, state: &LoaderState) -> Result<()> {
        let mine = self.state()?;
        let mismatch = [
            ("dataset length", state.dataset_len, mine.dataset_len),
            ("batch_size", state.batch_size, mine.batch_size),
            ("shuffle", u64::from(state.shuffle), u64::from(mine.shuffle)),
            (
                "drop_last",
                u64::from(state.drop_last),
                u64::from(mine.drop_last),
            ),
        ]
        .into_iter()
        .find(|(_, theirs, ours)| theirs != ours);
        if let Some((field, theirs, ours)) = mismatch {
            return Err(NnError::InvalidLoaderState {
                reason: format!("saved {field} is {theirs}, this loader's is {ours}"),
            });
        }
        if state.position >= self.batches_per_epoch() as u64 {
            return Err(NnError::InvalidLoaderState {
                reason: format!(
                    "position {} is past the {} batches of an epoch",
                    state.position,
                    self.batches_per_epoch()
                ),
            });
        }
        self.key = state.key;
        self.epoch = state.epoch;
        self.position = state.position;
        self.orders = OrderCache::default();
        self.restart_pipeline();
        Ok(())
    }

    /// The next batch, rolling over into the next epoch after the last batch of one.
    ///
    /// With workers, batches are loaded ahead (at most `prefetch_factor * num_workers`
    /// in flight) and may finish in any order; they are handed out strictly in order.
    /// An error (the dataset failed or panicked) leaves the position on the failed
    /// batch, so [`state`](Self::state) still describes a consistent point.
    ///
    /// Epochs are numbered `0 ..= u64::MAX - 1`; after the last batch of epoch
    /// `u64::MAX - 1` (or after restoring a state at epoch `u64::MAX`) every call
    /// errors with [`NnError::EpochsExhausted`] instead of wrapping to epoch 0.
    pub fn next_batch(&mut self) -> Result<Batch> {
        if self.epoch == u64::MAX {
            return Err(NnError::EpochsExhausted);
        }
        if self.pool.is_none() {
            let order = self
                .orders
                .get(self.key, self.epoch, self.len, self.shuffle)?;
            let indices = self.batch_indices(&order, self.position)?;
            let batch = load_batch_guarded(
                &*self.dataset,
                None,
                self.key,
                self.epoch,
                self.position,
                indices,
            )?;
            self.advance();
            return Ok(batch);
        }
        self.fill_pipeline()?;
        if !self.in_order {
            return self.next_in_arrival_order();
        }
        loop {
            let ticket = self.pipeline.delivered;
            if let Some(result) = self.pipeline.ready.remove(&ticket) {
                return match result {
                    Ok(batch) => {
                        self.pipeline.delivered += 1;
                        self.advance();
                        Ok(batch)
                    }
                    Err(error) => {
                        self.restart_pipeline();
                        Err(error)
                    }
                };
            }
            let Some(pool) = &self.pool else {
                unreachable!("checked above")
            };
            let done = pool.receive()?;
            if done.generation == self.pipeline.generation {
                self.pipeline.ready.insert(done.ticket, done.result);
            }
        }
    }

    /// `in_order(false)` delivery: the first batch any worker finishes. The prefix
    /// bookkeeping keeps `epoch` / `position` on the oldest batch not yet delivered. A
    /// failed batch is reported once and counted as delivered (skipped), like an
    /// exception raised out of PyTorch's iterator.
    fn next_in_arrival_order(&mut self) -> Result<Batch> {
        let (ticket, result) = match self.pipeline.ready.pop_first() {
            Some(ready) => ready,
            None => loop {
                let Some(pool) = &self.pool else {
                    unreachable!("in_order(false) is only kept with workers")
                };
                let done = pool.receive()?;
                if done.generation == self.pipeline.generation {
                    break (done.ticket, done.result);
                }
            },
        };
        self.pipeline.delivered_ahead.insert(ticket);
        while self
            .pipeline
            .delivered_ahead
            .remove(&self.pipeline.delivered)
        {
            self.pipeline.delivered += 1;
            self.advance();
        }
        result
    }

    /// The batches left in the current epoch, then `None` (the loader is then at the
    /// start of the next epoch). Like one `for batch in loader` pass in PyTorch.
    pub fn iter_epoch(&mut self) -> EpochIter<'_> {
        let epoch = self.epoch;
        EpochIter {
            loader: self,
            epoch,
            failed: false,
        }
    }

    /// Sample indices of batch `position` of an epoch with `order`. `position` is below
    /// `batches_per_epoch`, so `position * batch_size` is below the dataset length.
    fn batch_indices(&self, order: &EpochOrder, position: u64) -> Result<Vec<usize>> {
        let start = usize::try_from(position)
            .ok()
            .and_then(|p| p.checked_mul(self.batch_size))
            .ok_or_else(|| NnError::InvalidLoaderState {
                reason: format!("batch {position} starts past the end of the dataset"),
            })?;
        match (&self.sampler, &self.micro_shards) {
            (Some(sampler), _) => sampler.indices(order, start, self.batch_size),
            (None, Some(shards)) => shards.indices(order, start, self.batch_size),
            (None, None) => order.indices(start, self.batch_size),
        }
    }

    /// `(epoch, position)` of the batch after `(epoch, position)`. After the last epoch
    /// this is `(u64::MAX, 0)`, the exhausted position `next_batch` refuses to go past.
    fn successor(&self, epoch: u64, position: u64) -> (u64, u64) {
        if position + 1 >= self.batches_per_epoch() as u64 {
            (epoch.saturating_add(1), 0)
        } else {
            (epoch, position + 1)
        }
    }

    fn advance(&mut self) {
        (self.epoch, self.position) = self.successor(self.epoch, self.position);
    }

    /// Drops everything in flight and restarts dispatch at the current position.
    fn restart_pipeline(&mut self) {
        let generation = self.pipeline.generation + 1;
        if let Some(pool) = &self.pool {
            pool.set_generation(generation);
        }
        self.pipeline = Pipeline::at(generation, self.epoch, self.position);
    }

    /// Hands out jobs until `prefetch_factor * num_workers` batches are in flight (a
    /// product `build` checked against `MAX_IN_FLIGHT`), never past the last epoch.
    fn fill_pipeline(&mut self) -> Result<()> {
        let capacity = (self.prefetch_factor * self.num_workers) as u64;
        let in_flight = |p: &Pipeline| p.dispatched - p.delivered - p.delivered_ahead.len() as u64;
        while in_flight(&self.pipeline) < capacity && self.pipeline.dispatch_epoch != u64::MAX {
            let (epoch, position) = (
                self.pipeline.dispatch_epoch,
                self.pipeline.dispatch_position,
            );
            let order = self.orders.get(self.key, epoch, self.len, self.shuffle)?;
            let job = Job {
                generation: self.pipeline.generation,
                ticket: self.pipeline.dispatched,
                key: self.key,
                epoch,
                batch: position,
                indices: self.batch_indices(&order, position)?,
            };
            if let Some(pool) = &self.pool {
                pool.submit(job)?;
            }
            self.pipeline.dispatched += 1;
            (
                self.pipeline.dispatch_epoch,
                self.pipeline.dispatch_position,
            ) = self.successor(epoch, position);
        }
        Ok(())
    }
}

/// Iterator over the rest of one epoch; see [`DataLoader::iter_epoch`].
pub struct EpochIter<'a> {
    loader: &'a mut DataLoader,
    epoch: u64,
    failed: bool,
}

impl Iterator for EpochIter<'_> {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.loader.epoch != self.epoch {
            return None;
        }
        let result = self.loader.next_batch();
        self.failed = result.is_err();
        Some(result)
    }
}
