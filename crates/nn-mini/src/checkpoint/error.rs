//! `CheckpointError`: every way a checkpoint can fail to save, load or apply.

use std::path::PathBuf;

use tensor_core::{DType, TensorError};

/// Why a checkpoint could not be written, read or applied. Each variant names the
/// problem precisely enough to act on: a truncated copy, a flipped bit, a file from a
/// newer ditto, a model that changed shape.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// Reading, writing, syncing or renaming the file failed.
    #[error("checkpoint {path}: {source}")]
    Io {
        /// The file (or its temporary sibling / directory) involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file ends before the data its header describes (a partial copy or an
    /// interrupted write that bypassed the atomic save).
    #[error("checkpoint is truncated: {reason}")]
    Truncated {
        /// What was expected and what was found.
        reason: String,
    },
    /// Not a valid safetensors file, or not a ditto checkpoint (the safetensors parse
    /// error, or the missing piece, is in `reason`).
    #[error("checkpoint is malformed: {reason}")]
    Malformed {
        /// The parse error or the missing piece.
        reason: String,
    },
    /// The CRC-32 over the tensors and metadata differs from the stored one: some bytes
    /// changed after the file was written.
    #[error("checkpoint is corrupted: stored checksum {expected:#010x}, computed {found:#010x}")]
    ChecksumMismatch {
        /// The checksum stored in the file.
        expected: u32,
        /// The checksum of the file's contents as read.
        found: u32,
    },
    /// Written by a format version this build does not read.
    #[error("checkpoint format version {found:?} is not supported (this build reads version {supported})")]
    UnsupportedVersion {
        /// The version string found in the metadata.
        found: String,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// A tensor the restoring code needs is not in the checkpoint.
    #[error("checkpoint has no tensor {name:?}")]
    MissingTensor {
        /// Its name.
        name: String,
    },
    /// A tensor has other dims than the object it is restored into.
    #[error("checkpoint tensor {name:?} has shape {found:?}, expected {expected:?}")]
    ShapeMismatch {
        /// Its name.
        name: String,
        /// The dims of the object being restored.
        expected: Vec<usize>,
        /// The dims in the checkpoint.
        found: Vec<usize>,
    },
    /// A tensor has another dtype than the object it is restored into.
    #[error("checkpoint tensor {name:?} has dtype {found}, expected {expected}")]
    DTypeMismatch {
        /// Its name.
        name: String,
        /// The dtype of the object being restored.
        expected: DType,
        /// The dtype in the checkpoint.
        found: DType,
    },
    /// An entry parsed but its content is not valid for what it restores (a generator
    /// state that fails its own checks, a loss history of the wrong length, ...).
    #[error("checkpoint entry {name:?} is invalid: {reason}")]
    InvalidEntry {
        /// The tensor or metadata key.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Building or moving a tensor failed.
    #[error(transparent)]
    Tensor(#[from] TensorError),
}
