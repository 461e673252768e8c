//! The data loader: reproducible batches from any number of worker threads, resumable
//! mid-epoch.
//!
//! # Where every random number comes from
//!
//! A loader has one root key (from a seed, a key, or one block reserved from a
//! generator). Everything else is derived from it with [`rng_gen::fold_in`], never by
//! seed arithmetic and never from a running stream:
//!
//! ```text
//! loader key ── fold_in(epoch) ──► epoch key
//!                                   ├─ fold_in(ORDER_DOMAIN = 0) ──► order key
//!                                   │     └─ randperm(len) on a generator at this key
//!                                   │        = the order of epoch `epoch`
//!                                   └─ fold_in(SAMPLE_DOMAIN = 1) ──► sample root
//!                                         └─ fold_in(index) ──► sample key
//!                                              └─ SampleRng handed to Dataset::get
//! ```
//!
//! So batch `b` of epoch `e` is a pure function of `(loader key, e, b)`: the same for
//! 0, 1 or 16 workers, the same after a restart, and computable without replaying the
//! batches before it. That is why a [`LoaderState`] is just `(key, epoch, position)`
//! plus a description of the loader, and why resuming mid-epoch needs no replay.
//!
//! # Data parallel
//!
//! [`DataLoaderBuilder::sampler`] with a [`DistributedSampler`] makes a loader load one
//! rank's share of every epoch, with PyTorch's semantics (the epoch's order padded to a
//! multiple of the world size and dealt out round-robin). The order, the epoch and every
//! sample's key are the single-process loader's, so `W` ranks with batches of `b` load
//! exactly the batches one loader with batches of `W * b` loads, row for row.
//! [`DataLoaderBuilder::micro_shard_sampler`] with a [`MicroShardSampler`] instead loads
//! the single process's batches themselves, filtered down to the rows of the
//! micro-shards one rank holds (`distributed`'s invariant mode, any world size).
//!
//! # Delivery order
//!
//! Workers finish batches in whatever order the OS schedules them; by default the loader
//! delivers in order (ticket by ticket), so a run sees the same sequence of batches for
//! any worker count. `in_order(false)` (PyTorch's `DataLoader(in_order=False)`) delivers
//! batches as workers finish them instead: each batch is still the same, but their order
//! depends on timing. That is the loader's nondeterministic fast path
//! ([`IN_ORDER_FALSE`]), which the `use_deterministic_algorithms` switch
//! (docs/determinism.md#the-switch) governs: `Warn` warns once, `Error` refuses it.
//!
//! # Limits
//!
//! Nothing the loader is given can make it panic or abort; sizes past these documented
//! limits are typed errors ([`NnError::LoaderLimit`](crate::NnError::LoaderLimit)) from
//! `build`, before anything is allocated:
//!
//! - unshuffled datasets: none. The order is the identity, computed per batch (position
//!   `i` is sample `i`), so a loader over `usize::MAX` samples costs nothing up front.
//! - shuffled datasets: at most [`MAX_SHUFFLED_LEN`] samples (the permutation is stored).
//! - `prefetch_factor * num_workers`: at most [`MAX_IN_FLIGHT`] batches in flight.
//! - epochs: `0 ..= u64::MAX - 1`; a loader past the last one errors with
//!   [`NnError::EpochsExhausted`](crate::NnError::EpochsExhausted) instead of wrapping.

mod batch;
mod builder;
mod dataset;
mod distributed;
mod keys;
mod loader;
mod micro_shards;
mod order;
mod rank_share;
mod settings;
mod state;
mod workers;

pub(crate) use batch::load_batch;
pub use batch::Batch;
pub use builder::{DataLoaderBuilder, IN_ORDER_FALSE, MAX_IN_FLIGHT};
pub use dataset::{Dataset, Sample, SampleRng};
pub use distributed::DistributedSampler;
pub use keys::{epoch_key, order_key, sample_key, ORDER_DOMAIN, SAMPLE_DOMAIN};
pub use loader::{DataLoader, EpochIter};
pub use micro_shards::MicroShardSampler;
pub use order::{epoch_order, EpochOrder, MAX_SHUFFLED_LEN};
pub use rank_share::RankShare;
pub use state::{LoaderState, LOADER_STATE_VERSION};
