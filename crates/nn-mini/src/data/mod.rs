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
//! # Delivery order
//!
//! Workers finish batches in whatever order the OS schedules them; the loader delivers
//! in order (ticket by ticket). `in_order(false)` instead hands each batch out as soon as
//! it is ready: the loader's nondeterministic fast path ([`IN_ORDER_FALSE`]), which
//! DESIGN.md §4's `use_deterministic_algorithms` switch governs (refused in `Error`
//! mode, warned about once in `Warn` mode).

mod batch;
mod dataset;
mod keys;
mod loader;
mod state;
mod workers;

pub use batch::Batch;
pub use dataset::{Dataset, Sample, SampleRng};
pub use keys::{epoch_key, epoch_order, order_key, sample_key, ORDER_DOMAIN, SAMPLE_DOMAIN};
pub use loader::{DataLoader, DataLoaderBuilder, EpochIter, IN_ORDER_FALSE};
pub use state::{LoaderState, LOADER_STATE_VERSION};
