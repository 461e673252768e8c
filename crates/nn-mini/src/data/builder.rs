//! `DataLoaderBuilder`: the loader's options, their limits, and where its key comes from.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use rng_gen::{fold_in, Generator, Key};
use tensor_core::determinism::{Algorithm, FastPath};
use tensor_core::Device;

use super::loader::DataLoader;
use super::order::check_shuffled_len;
use super::settings::{batches_per_epoch, Settings};
use super::workers::WorkerPool;
use super::{Dataset, DistributedSampler, MicroShardSampler};
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
    fast_runs: AtomicU64::new(0),
};

/// The most batches a loader keeps in flight, `prefetch_factor * num_workers`: 4096.
/// Each in-flight batch holds its samples in memory and each worker is an OS thread, so
/// a bound keeps a mistyped `prefetch_factor(usize::MAX)` from growing memory until the
/// process is killed (the product used to wrap around). PyTorch's default is 2 per
/// worker; 4096 allows, for example, 64 workers with a prefetch factor of 64.
pub const MAX_IN_FLIGHT: usize = 4096;

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
    sampler: Option<DistributedSampler>,
    micro_shards: Option<MicroShardSampler>,
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

    /// Loads only this rank's share of every epoch, dealt out by `sampler` with
    /// PyTorch's `DistributedSampler` semantics (like `DataLoader(sampler=...)`). The
    /// epoch order is still the loader's (shuffled or not, from its key and the epoch),
    /// so every rank, given the same key, shares it; `batch_size` is the per-rank batch.
    #[must_use]
    pub fn sampler(mut self, sampler: DistributedSampler) -> Self {
        self.sampler = Some(sampler);
        self
    }

    /// Loads only this rank's micro-shards of every batch (see [`MicroShardSampler`]):
    /// `batch_size` is then the global batch, and each batch holds this rank's rows of
    /// the single process's batch at the same position. Not with [`sampler`](Self::sampler).
    #[must_use]
    pub fn micro_shard_sampler(mut self, sampler: MicroShardSampler) -> Self {
        self.micro_shards = Some(sampler);
        self
    }

    /// Checks the options, derives the key and starts the workers. Without `seed`, `key`
    /// or `generator`, the key comes from the default CPU generator (as PyTorch's loader
    /// draws from the global generator), so `manual_seed` makes it reproducible.
    ///
    /// Every limit is checked here, before anything is allocated or spawned, with
    /// [`NnError::LoaderLimit`] naming it: `prefetch_factor * num_workers` at most
    /// [`MAX_IN_FLIGHT`] (overflow included), and a shuffled dataset at most
    /// [`MAX_SHUFFLED_LEN`](super::MAX_SHUFFLED_LEN) samples.
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
        let in_flight = self.prefetch_factor as u128 * self.num_workers as u128;
        if in_flight > MAX_IN_FLIGHT as u128 {
            return Err(NnError::LoaderLimit {
                what: "prefetch_factor * num_workers (batches in flight)",
                value: in_flight,
                limit: MAX_IN_FLIGHT as u64,
                constant: "MAX_IN_FLIGHT",
            });
        }
        if self.sampler.is_some() && self.micro_shards.is_some() {
            return Err(NnError::invalid(
                "DataLoader",
                "a loader takes a DistributedSampler or a MicroShardSampler, not both",
            ));
        }
        let len = self.dataset.len();
        let positions = self.sampler.map_or(len, |s| s.num_samples(len));
        let batches = batches_per_epoch(positions, self.batch_size, self.drop_last);
        if batches == 0 {
            return Err(NnError::invalid(
                "DataLoader",
                format!(
                    "{positions} samples per epoch (of a dataset of {len}) with batch_size {} and drop_last = {} make no batches",
                    self.batch_size, self.drop_last
                ),
            ));
        }
        if self.shuffle {
            check_shuffled_len(len)?;
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
        Ok(DataLoader::start(
            Settings {
                dataset: self.dataset,
                len,
                batch_size: self.batch_size,
                shuffle: self.shuffle,
                drop_last: self.drop_last,
                num_workers: self.num_workers,
                prefetch_factor: self.prefetch_factor,
                in_order,
                sampler: self.sampler,
                micro_shards: self.micro_shards,
            },
            key,
            pool,
        ))
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
            sampler: None,
            micro_shards: None,
        }
    }
}
