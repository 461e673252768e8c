//! Checkpoints: one safetensors file holding everything a training run needs to continue
//! bit for bit, written atomically and verified on load.
//!
//! What goes in (see [`crate::train::Trainer`] for the full list a run saves):
//! parameters (`model.*`), optimiser buffers (`optim.*`), generator states (`rng.*`,
//! U8), the loader state (`loader.state`, U8), the step and the loss history
//! (`train.*`). Metadata carries the format name, version and a CRC-32 ([`format`](mod@format)).
//!
//! Loading never panics on a bad file: truncation, corruption, another version, a
//! missing tensor or one of the wrong shape each give their own [`CheckpointError`].

mod atomic;
mod error;
mod file;
pub mod format;
mod parts;

pub use error::CheckpointError;
pub use file::Checkpoint;
pub use format::FORMAT_VERSION;
pub use parts::{default_cuda_rng_name, DEFAULT_CPU_RNG};
