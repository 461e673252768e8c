//! Checkpoints: one safetensors file holding everything a training run needs to continue
//! bit for bit, written atomically and verified on load.
//!
//! What goes in (see [`crate::train::Trainer`] for the full list a run saves):
//! parameters (`model.*`), optimiser buffers (`optim.*`), generator states (`rng.*`,
//! U8), the loader state (`loader.state`, U8), the step and the loss history
//! (`train.*`). Metadata carries the format name, version and a SHA-256 checksum over
//! every entry ([`format`](mod@format)), so a flipped bit, an edited value, or entries
//! swapped or spliced in from another checkpoint are all refused.
//!
//! Loading never panics on a bad file: truncation, corruption, another version, a
//! missing tensor or one of the wrong shape each give their own [`CheckpointError`].
//! Saving is atomic and cleans up after saves that were killed (`stale.rs`).
//!
//! Around single files: [`check_writable`] tells before a run trains whether a save
//! path can be written, and a [`CheckpointDir`] keeps a folder of a run's periodic
//! checkpoints (the newest `keep`) and finds the newest one that loads, for a job
//! restarted with the same command line.

mod atomic;
mod digest;
mod dir;
mod error;
mod file;
pub mod format;
mod optimizer;
mod parts;
mod probe;
pub(crate) mod run_entries;
mod stale;

pub use dir::{CheckpointDir, Latest, Saved, Skipped, DEFAULT_KEEP};
pub use error::CheckpointError;
pub use file::Checkpoint;
pub use format::{FORMAT_VERSION, LEGACY_FORMAT_VERSION};
pub use parts::{default_cuda_rng_name, default_rng_name, DEFAULT_CPU_RNG};
pub use probe::check_writable;
