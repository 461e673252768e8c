//! `Checkpoint`: named tensors plus string metadata, saved atomically as one file.

use std::collections::BTreeMap;
use std::path::Path;

use tensor_core::{DType, Device, Tensor};

use super::atomic::write_atomically;
use super::format::{self, Accept, CHECKSUM_KEY, FORMAT_KEY, FORMAT_VERSION, VERSION_KEY};
use super::stale::parse_temp_name;
use super::CheckpointError;

/// The contents of one checkpoint file: tensors by name and metadata strings.
///
/// The training pieces put themselves in and take themselves out through the methods
/// in `parts.rs` ([`put_module`](Self::put_module), [`restore_module`](Self::restore_module),
/// and the optimiser, generator and loader twins); the format itself is described in
/// [`format`](mod@super::format) and is plain safetensors, so the file opens in PyTorch.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    tensors: BTreeMap<String, Tensor>,
    metadata: BTreeMap<String, String>,
    /// The format version the contents were read from ([`FORMAT_VERSION`] when built
    /// in memory).
    format_version: u32,
}

impl Default for Checkpoint {
    fn default() -> Self {
        Checkpoint {
            tensors: BTreeMap::new(),
            metadata: BTreeMap::new(),
            format_version: FORMAT_VERSION,
        }
    }
}

impl Checkpoint {
    /// An empty checkpoint.
    #[must_use]
    pub fn new() -> Self {
        Checkpoint::default()
    }

    /// The format version the checkpoint was read from: [`FORMAT_VERSION`] for one
    /// built in memory or read from a current file, 1 for one read with
    /// [`load_allowing_v1`](Self::load_allowing_v1) from an old file. Saving always
    /// writes [`FORMAT_VERSION`].
    #[must_use]
    pub fn format_version(&self) -> u32 {
        self.format_version
    }

    /// Stores `tensor` under `name` (replacing any tensor of that name). The checkpoint
    /// keeps a CPU view; tensor-core's copy-on-write means later in-place updates of
    /// the live tensor do not change what was stored.
    pub fn insert(
        &mut self,
        name: impl Into<String>,
        tensor: &Tensor,
    ) -> Result<(), CheckpointError> {
        let cpu = tensor.to_device(Device::Cpu)?.contiguous()?;
        self.tensors.insert(name.into(), cpu);
        Ok(())
    }

    /// Stores `bytes` as a 1-D U8 tensor (generator and loader states).
    pub fn insert_bytes(
        &mut self,
        name: impl Into<String>,
        bytes: &[u8],
    ) -> Result<(), CheckpointError> {
        let t = Tensor::from_slice(bytes, &[bytes.len()], Device::Cpu)?;
        self.tensors.insert(name.into(), t);
        Ok(())
    }

    /// Sets a metadata string. The format's own keys (`ditto.format`,
    /// `ditto.format_version`, `ditto.checksum`) are written on save and cannot be set.
    pub fn set_metadata(
        &mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<(), CheckpointError> {
        let key = key.into();
        if [FORMAT_KEY, VERSION_KEY, CHECKSUM_KEY].contains(&key.as_str()) {
            return Err(CheckpointError::InvalidEntry {
                name: key,
                reason: "this metadata key is reserved for the file format".into(),
            });
        }
        self.metadata.insert(key, value.into());
        Ok(())
    }

    /// A metadata string, if present.
    #[must_use]
    pub fn metadata(&self, key: &str) -> Option<&str> {
        self.metadata.get(key).map(String::as_str)
    }

    /// A metadata string, or [`CheckpointError::InvalidEntry`] naming the missing key.
    pub fn require_metadata(&self, key: &str) -> Result<&str, CheckpointError> {
        self.metadata(key)
            .ok_or_else(|| CheckpointError::InvalidEntry {
                name: key.to_string(),
                reason: "metadata key is missing".into(),
            })
    }

    /// All tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// The tensor `name`, or [`CheckpointError::MissingTensor`].
    pub fn tensor(&self, name: &str) -> Result<&Tensor, CheckpointError> {
        self.tensors
            .get(name)
            .ok_or_else(|| CheckpointError::MissingTensor { name: name.into() })
    }

    /// The tensor `name`, checked to have `dims` and `dtype` (the object it will be
    /// restored into), or the error naming the difference.
    pub fn tensor_like(
        &self,
        name: &str,
        dims: &[usize],
        dtype: DType,
    ) -> Result<&Tensor, CheckpointError> {
        let t = self.tensor(name)?;
        if t.dims() != dims {
            return Err(CheckpointError::ShapeMismatch {
                name: name.into(),
                expected: dims.to_vec(),
                found: t.dims().to_vec(),
            });
        }
        if t.dtype() != dtype {
            return Err(CheckpointError::DTypeMismatch {
                name: name.into(),
                expected: dtype,
                found: t.dtype(),
            });
        }
        Ok(t)
    }

    /// The bytes of a 1-D U8 tensor stored with [`insert_bytes`](Self::insert_bytes).
    pub fn bytes(&self, name: &str) -> Result<Vec<u8>, CheckpointError> {
        let t = self.tensor(name)?;
        let t = self.tensor_like(name, &[t.elem_count()], DType::U8)?;
        Ok(t.to_vec::<u8>()?)
    }

    /// The file contents (see [`format`](mod@super::format)).
    pub fn to_bytes(&self) -> Result<Vec<u8>, CheckpointError> {
        format::encode(&self.tensors, &self.metadata)
    }

    /// Parses and verifies file contents: structure, format version (2; version 1 is
    /// refused with [`CheckpointError::WeakFormatVersion`]), SHA-256 checksum.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, CheckpointError> {
        Checkpoint::decode(bytes, Accept::Current)
    }

    /// [`from_bytes`](Self::from_bytes) that also reads format version 1, verified with
    /// its weaker CRC-32 (see [`format`](mod@super::format)): for converting old files.
    pub fn from_bytes_allowing_v1(bytes: &[u8]) -> Result<Self, CheckpointError> {
        Checkpoint::decode(bytes, Accept::CurrentOrV1)
    }

    fn decode(bytes: &[u8], accept: Accept) -> Result<Self, CheckpointError> {
        let ((tensors, metadata), format_version) = format::decode(bytes, accept)?;
        Ok(Checkpoint {
            tensors,
            metadata,
            format_version,
        })
    }

    /// Writes the checkpoint to `path` atomically: after a crash at any point, `path`
    /// holds either the previous file or this one, never a mix. Temporary files of
    /// `path` left by killed processes are removed first (never a live writer's).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), CheckpointError> {
        write_atomically(path.as_ref(), &self.to_bytes()?)
    }

    /// Reads and verifies `path` (format version 2). A path naming the temporary file
    /// of an unfinished save is refused with [`CheckpointError::TemporaryFile`], even
    /// when its contents are complete: the save it belongs to never finished.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        Checkpoint::from_bytes(&read_checkpoint_file(path.as_ref())?)
    }

    /// [`load`](Self::load) that also reads format version 1 (CRC-32 only). Convert an
    /// old file you trust with `Checkpoint::load_allowing_v1(old)?.save(new)`.
    pub fn load_allowing_v1(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        Checkpoint::from_bytes_allowing_v1(&read_checkpoint_file(path.as_ref())?)
    }
}

/// The bytes of `path`, unless its name is a save's temporary file.
fn read_checkpoint_file(path: &Path) -> Result<Vec<u8>, CheckpointError> {
    let temp = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_temp_name);
    if let Some((target, _)) = temp {
        return Err(CheckpointError::TemporaryFile {
            path: path.to_path_buf(),
            target: path.with_file_name(target),
        });
    }
    std::fs::read(path).map_err(|source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    })
}
