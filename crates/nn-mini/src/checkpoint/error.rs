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
    /// A path a run will save to cannot be written: checked before the run starts
    /// ([`check_writable`](crate::checkpoint::check_writable),
    /// [`CheckpointDir::create`](crate::checkpoint::CheckpointDir::create)), so a bad
    /// path costs seconds, not the training before the first save.
    #[error("cannot save checkpoints at {path}: {source}")]
    NotWritable {
        /// The checkpoint file or folder asked for.
        path: PathBuf,
        /// What the operating system said when a file was created there.
        #[source]
        source: std::io::Error,
    },
    /// A checkpoint folder holds checkpoint files, but none of them loads. Starting a
    /// fresh run there instead would bury what may be a run's only progress (files of a
    /// newer ditto, say), and its saves would later prune them away.
    #[error(
        "none of the {} checkpoint(s) in {dir} loads: {}",
        .skipped.len(),
        describe_skipped(.skipped)
    )]
    NoLoadableCheckpoint {
        /// The folder.
        dir: PathBuf,
        /// Each checkpoint file, newest first, with why it did not load.
        skipped: Vec<(PathBuf, String)>,
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
    /// The checksum over the tensors and metadata (SHA-256 in format version 2) differs
    /// from the stored one: bytes changed after the file was written, or entries were
    /// swapped, or spliced in from another checkpoint.
    #[error(
        "checkpoint is corrupted: stored checksum {expected}, computed {found} (bytes changed \
         after the file was written, or entries were swapped or spliced in from another file)"
    )]
    ChecksumMismatch {
        /// The checksum stored in the file (`sha256:<hex>` or, version 1, `crc32:<hex>`).
        expected: String,
        /// The checksum of the file's contents as read.
        found: String,
    },
    /// Written by a format version this build does not read.
    #[error("checkpoint format version {found:?} is not supported (this build reads version {supported})")]
    UnsupportedVersion {
        /// The version string found in the metadata.
        found: String,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// Format version 1, refused by default: its CRC-32 checksum cannot detect
    /// generator or loader states swapped or spliced in from another file.
    #[error(
        "checkpoint format version {found} is refused: its CRC-32 checksum cannot detect \
         generator or loader states swapped or spliced in from another file. If you trust \
         this file, convert it once with `Checkpoint::load_allowing_v1(path)?.save(new_path)`, \
         which verifies the CRC-32 and writes format version 2 (SHA-256)"
    )]
    WeakFormatVersion {
        /// The version found (1).
        found: u32,
    },
    /// The path names a temporary file of an unfinished save, not a checkpoint.
    #[error(
        "{path} is the temporary file of a save that did not finish, not a checkpoint; \
         load {target} instead"
    )]
    TemporaryFile {
        /// The path given.
        path: PathBuf,
        /// The checkpoint the save was writing.
        target: PathBuf,
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
    /// An entry parsed but its content is not valid for what it restores (a loss
    /// history of the wrong length, a momentum-buffer list that names no parameter, ...).
    #[error("checkpoint entry {name:?} is invalid: {reason}")]
    InvalidEntry {
        /// The tensor or metadata key.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Entries that are each valid but do not belong together, or do not belong to the
    /// run they are restored into (a loader state of another seed, a loader position
    /// that is not the saved step's, momentum buffers for only some parameters, a model
    /// shape other than the configuration's).
    #[error("checkpoint entry {name:?} does not fit the run: {reason}")]
    Inconsistent {
        /// The tensor or metadata key.
        name: String,
        /// What was expected and what was found.
        reason: String,
    },
    /// A generator state that fails its own checks, or a generator (device) that cannot
    /// be saved or restored; the generator error is the source.
    #[error("checkpoint entry {name:?}: {source}")]
    Generator {
        /// The entry (e.g. `rng.dropout`, `rng.default.cpu`).
        name: String,
        /// What rng-gen reported.
        #[source]
        source: rng_gen::RngError,
    },
    /// A loader state that fails its own checks or does not fit the loader; the
    /// loader's error is the source.
    #[error("checkpoint entry {name:?}: {source}")]
    Loader {
        /// The entry (e.g. `loader.state`).
        name: String,
        /// What the loader reported.
        #[source]
        source: Box<crate::NnError>,
    },
    /// A generator name that would collide with the default generators' entries.
    #[error(
        "generator name {name:?} is reserved: `rng.default.*` holds the default generators \
         (save those with put_default_generators); pick another name"
    )]
    ReservedGeneratorName {
        /// The name given.
        name: String,
    },
    /// Building or moving a tensor failed. Every tensor-core error of checkpoint code
    /// arrives here (also those rng-gen passes through), and reaches an [`NnError`] as
    /// [`NnError::Tensor`](crate::NnError::Tensor): one error, one path.
    ///
    /// [`NnError`]: crate::NnError
    #[error(transparent)]
    Tensor(#[from] TensorError),
}

impl CheckpointError {
    /// The error for generator entry `name`, with rng-gen's tensor errors taking the
    /// one path tensor errors take ([`CheckpointError::Tensor`]).
    pub(crate) fn generator(name: impl Into<String>, source: rng_gen::RngError) -> Self {
        match source {
            rng_gen::RngError::Tensor(e) => CheckpointError::Tensor(e),
            source => CheckpointError::Generator {
                name: name.into(),
                source,
            },
        }
    }

    /// The error for loader entry `name`, with the loader's tensor, rng and checkpoint
    /// errors unwrapped so each low-level error keeps one path.
    pub(crate) fn loader(name: impl Into<String>, source: crate::NnError) -> Self {
        match source {
            crate::NnError::Tensor(e) => CheckpointError::Tensor(e),
            crate::NnError::Rng(e) => CheckpointError::generator(name, e),
            crate::NnError::Checkpoint(e) => e,
            source => CheckpointError::Loader {
                name: name.into(),
                source: Box::new(source),
            },
        }
    }
}

/// `a: why; b: why` for [`CheckpointError::NoLoadableCheckpoint`].
fn describe_skipped(skipped: &[(PathBuf, String)]) -> String {
    let each: Vec<String> = skipped
        .iter()
        .map(|(path, why)| format!("{}: {why}", path.display()))
        .collect();
    each.join("; ")
}
