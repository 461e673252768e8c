//! `DataLoader`: batches in a reproducible order, loaded by worker threads, delivered in
//! order, resumable mid-epoch.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rng_gen::{fold_in, Generator, Key};
use tensor_core::determinism::{Algorithm, FastPath};
use tensor_core::Device;

use super::batch::{load_batch_guarded, Batch};
use super::keys::epoch_order;
use super::workers::{Job, WorkerPool};
use super::{Dataset, LoaderState};
use crate::{NnError, Result};

/// The loader's nondeterministic fast path, `in_order(false)`, for the determinism table
/// (`ditto::nondeterministic_ops`) and the switch.
pub static IN_ORDER_FALSE: FastPath = FastPath {
    op: "DataLoader(in_order = false)",
    devices: "CPU",
    fast: "with workers, each batch is handed out as soon as any worker finishes it \
           (batch contents stay reproducible; their order follows thread timing)",
    deterministic: "batches delivered in sampling order, whatever the worker count",
    auto_fast_when: None,
    alternative: "DataLoader::builder(..).in_order(true), which delivers batches in sampling order",
};

/// Where the loader's root key comes from.
enum KeySource {
    Key(Key),
    Generator(Generator),
}

/// Configures a [`DataLoader`]; defaults follow `torch.utils.data.DataLoader`
/// (batch size 1, no shuffle, keep the last batch, no workers, prefetch factor 2).
pub struct DataLoaderBuilder {
    dataset: Arc<dyn Dataset>,
    batch_size: usize,
    shuffle: bool,
    drop_last: bool,
    num_workers: usize,
    prefetch_factor: usize,
    key: Option<KeySource>,
    in_order: bool,
}

impl DataLoaderBuilder {
    /// Samples per batch (> 0).
    #[must_use]
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Visits each epoch in its own random order.
    #[must_use]
    pub fn shuffle(mut self, shuffle: bool) -> Self {
        self.shuffle = shuffle;
        self
    }

    /// Drops the last batch of an epoch when it would be smaller than `batch_size`.
    #[must_use]
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }

    /// Worker threads loading batches ahead (0 loads on the calling thread). Changes
    /// speed only, never the batches.
    #[must_use]
    pub fn num_workers(mut self, num_workers: usize) -> Self {
        self.num_workers = num_workers;
        self
    }

    /// Batches in flight per worker (> 0); bounds memory used by prefetching.
    #[must_use]
    pub fn prefetch_factor(mut self, prefetch_factor: usize) -> Self {
        self.prefetch_factor = prefetch_factor;
        self
    }

    /// Uses `Key::new(seed)` as the loader's root key.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.key = Some(KeySource::Key(Key::new(seed)));
        self
    }

    /// Uses `key` as the loader's root key (e.g. one derived from a run seed with
    /// [`fold_in`]).
    #[must_use]
    pub fn key(mut self, key: Key) -> Self {
        self.key = Some(KeySource::Key(key));
        self
    }

    /// Derives the root key from `generator`, like `DataLoader(generator=g)`: at `build`
    /// one block is reserved from it and the key is `fold_in(reserved, 0)`. The generator
    /// advances by one block; the loader never touches it again, so its later ops do
    /// not depend on how many batches were drawn.
    #[must_use]
    pub fn generator(mut self, generator: &Generator) -> Self {
        self.key = Some(KeySource::Generator(generator.clone()));
        self
    }

    /// `false` lets a loader with workers hand out each batch as soon as any worker
    /// finishes it, instead of waiting for the next one in sampling order (PyTorch's
    /// `DataLoader(in_order=False)`): faster when batch times vary, but the order then
    /// depends on thread timing. It is the loader's nondeterministic fast path, so
    /// `build` consults [`tensor_core::use_deterministic_algorithms`]: in `Error` mode it
    /// refuses, in `Warn` mode it warns. Each batch's *content* is still a pure function
    /// of (key, epoch, batch index); only the delivery order varies. Default `true`.
    #[must_use]
    pub fn in_order(mut self, in_order: bool) -> Self {
        self.in_order = in_order;
        self
    }

    /// Checks the options, derives the key and starts the workers. Without `seed`, `key`
    /// or `generator`, the key comes from the default CPU generator (as PyTorch's loader
    /// draws from the global generator), so `manual_seed` makes it reproducible.
    pub fn build(self) -> Result<DataLoader> {
        if self.batch_size == 0 {
            return Err(NnError::invalid("DataLoader", "batch_size must be > 0"));
        }
        if self.prefetch_factor == 0 {
            return Err(NnError::invalid(
                "DataLoader",
                "prefetch_factor must be > 0",
            ));
        }
        let len = self.dataset.len();
        let batches = batches_per_epoch(len, self.batch_size, self.drop_last);
        if batches == 0 {
            return Err(NnError::invalid(
                "DataLoader",
                format!(
                    "a dataset of {len} samples with batch_size {} and drop_last = {} has no batches",
                    self.batch_size, self.drop_last
                ),
            ));
        }
        let in_order = self.in_order || self.num_workers == 0;
        if !in_order {
            // An explicit request for the arrival-order fast path (see `IN_ORDER_FALSE`).
            IN_ORDER_FALSE.choose(Algorithm::Fast, Device::Cpu, true)?;
        }
        let key = match self.key {
            Some(KeySource::Key(key)) => key,
            Some(KeySource::Generator(g)) => fold_in(g.reserve_blocks(1), 0),
            None => fold_in(
                rng_gen::default_generator(Device::Cpu)?.reserve_blocks(1),
                0,
            ),
        };
        let pool = match self.num_workers {
            0 => None,
            n => Some(WorkerPool::spawn(n, Arc::clone(&self.dataset))?),
        };
        let mut loader = DataLoader {
            dataset: self.dataset,
            batch_size: self.batch_size,
            shuffle: self.shuffle,
            drop_last: self.drop_last,
            num_workers: self.num_workers,
            prefetch_factor: self.prefetch_factor,
            in_order,
            key,
            epoch: 0,
            position: 0,
            orders: OrderCache::default(),
            pool,
            pipeline: Pipeline::at(0, 0, 0),
        };
        loader.restart_pipeline();
        Ok(loader)
    }
}

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
    batch_size: usize,
    shuffle: bool,
    drop_last: bool,
    num_workers: usize,
    prefetch_factor: usize,
    /// False only with workers and `in_order(false)`: deliver in arrival order.
    in_order: bool,
    key: Key,
    /// Epoch of the next batch to deliver.
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

/// Batches of an epoch: `len / batch_size` when dropping the last partial batch,
/// `ceil(len / batch_size)` otherwise.
fn batches_per_epoch(len: usize, batch_size: usize, drop_last: bool) -> usize {
    if drop_last {
        len / batch_size
    } else {
        len.div_ceil(batch_size)
    }
}

/// The permutations of the (at most two) epochs in use: the one being delivered and the
/// one prefetching may run into.
#[derive(Default)]
struct OrderCache {
    entries: Vec<(u64, Arc<Vec<usize>>)>,
}

impl OrderCache {
    fn get(&mut self, key: Key, epoch: u64, len: usize, shuffle: bool) -> Result<Arc<Vec<usize>>> {
        if let Some((_, order)) = self.entries.iter().find(|(e, _)| *e == epoch) {
            return Ok(Arc::clone(order));
        }
        let order = Arc::new(epoch_order(key, epoch, len, shuffle)?);
        if self.entries.len() >= 2 {
            self.entries.remove(0);
        }
        self.entries.push((epoch, Arc::clone(&order)));
        Ok(order)
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
    /// Starts configuring a loader over `dataset`.
    #[must_use]
    pub fn builder(dataset: Arc<dyn Dataset>) -> DataLoaderBuilder {
        DataLoaderBuilder {
            dataset,
            batch_size: 1,
            shuffle: false,
            drop_last: false,
            num_workers: 0,
            prefetch_factor: 2,
            in_order: true,
            key: None,
        }
    }

    /// Batches per epoch.
    #[must_use]
    pub fn batches_per_epoch(&self) -> usize {
        batches_per_epoch(self.dataset.len(), self.batch_size, self.drop_last)
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
            dataset_len: self.dataset.len() as u64,
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
    pub fn next_batch(&mut self) -> Result<Batch> {
        let len = self.dataset.len();
        if self.pool.is_none() {
            let order = self.orders.get(self.key, self.epoch, len, self.shuffle)?;
            let indices = self.batch_indices(&order, self.position);
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

    /// Sample indices of batch `position` of an epoch with `order`.
    fn batch_indices(&self, order: &[usize], position: u64) -> Vec<usize> {
        let start = position as usize * self.batch_size;
        let end = (start + self.batch_size).min(order.len());
        order[start..end].to_vec()
    }

    /// `(epoch, position)` of the batch after `(epoch, position)`.
    fn successor(&self, epoch: u64, position: u64) -> (u64, u64) {
        if position + 1 >= self.batches_per_epoch() as u64 {
            (epoch + 1, 0)
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

    /// Hands out jobs until `prefetch_factor * num_workers` batches are in flight.
    fn fill_pipeline(&mut self) -> Result<()> {
        let capacity = (self.prefetch_factor * self.num_workers) as u64;
        let len = self.dataset.len();
        let in_flight = |p: &Pipeline| p.dispatched - p.delivered - p.delivered_ahead.len() as u64;
        while in_flight(&self.pipeline) < capacity {
            let (epoch, position) = (
                self.pipeline.dispatch_epoch,
                self.pipeline.dispatch_position,
            );
            let order = self.orders.get(self.key, epoch, len, self.shuffle)?;
            let job = Job {
                generation: self.pipeline.generation,
                ticket: self.pipeline.dispatched,
                key: self.key,
                epoch,
                batch: position,
                indices: self.batch_indices(&order, position),
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
