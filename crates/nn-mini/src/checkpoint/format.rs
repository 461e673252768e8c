//! The checkpoint file format: a standard safetensors file plus three metadata keys.
//!
//! ```text
//! [u64 LE header length n][n bytes of JSON header, space-padded to a multiple of 8][data]
//! header = {"__metadata__": {"ditto.checksum": "sha256:<64 hex digits>",
//!                            "ditto.format": "ditto-checkpoint",
//!                            "ditto.format_version": "2", ...user keys...},
//!           "<name>": {"dtype": "F32", "shape": [256, 64], "data_offsets": [b, e]}, ...}
//! ```
//!
//! Tensors are little-endian and row-major, in safetensors' standard dtypes (F32, F64,
//! F16, BF16, I64, U32, U8, BOOL), so `safetensors.torch.load_file` opens the file.
//! Unlike `safetensors::serialize` (whose metadata map is a `HashMap`), the header is
//! written in a fixed order (metadata keys sorted; tensors by descending element size
//! then name, which keeps every tensor aligned): the same training state always gives
//! the same bytes.
//!
//! # Versions
//!
//! - **2** (written by this build): the checksum is SHA-256 over a canonical,
//!   length-prefixed encoding of every metadata pair and every tensor's name, dtype,
//!   shape and bytes (`checkpoint/digest.rs` spells out the encoding and why SHA-256).
//!   Swapping, splicing or editing any entry is refused with
//!   [`CheckpointError::ChecksumMismatch`].
//! - **1** (written by earlier builds): the same encoding without the two counts,
//!   under CRC-32. CRC-32 cannot see generator or loader states that were swapped or
//!   spliced in from another checkpoint (each ends in its own CRC, which makes it
//!   invisible to an outer CRC), so [`Checkpoint::load`](super::Checkpoint::load) refuses
//!   version 1 with [`CheckpointError::WeakFormatVersion`], whose message says how to
//!   convert: [`Checkpoint::load_allowing_v1`](super::Checkpoint::load_allowing_v1)
//!   verifies the CRC-32 and loads it, and saving the result writes version 2. Convert
//!   only files you trust: whatever a version-1 file holds is sealed as it is.
//! - anything else: [`CheckpointError::UnsupportedVersion`].

use std::collections::BTreeMap;

use safetensors::tensor::{Dtype, SafeTensors};
use tensor_core::{bf16, f16, DType, Device, Shape, Tensor};

use super::digest::{self, crc32_checksum, sha256_checksum, CRC32_PREFIX, SHA256_PREFIX};
use super::CheckpointError;

/// The format version this build writes (and reads by default).
pub const FORMAT_VERSION: u32 = 2;
/// The older format version this build still reads, on request only (see the module
/// docs).
pub const LEGACY_FORMAT_VERSION: u32 = 1;
/// Metadata key naming the format, so a random safetensors file is not taken for a
/// checkpoint.
pub const FORMAT_KEY: &str = "ditto.format";
/// Value of [`FORMAT_KEY`].
pub const FORMAT_NAME: &str = "ditto-checkpoint";
/// Metadata key holding the format version.
pub const VERSION_KEY: &str = "ditto.format_version";
/// Metadata key holding the checksum (defined beside the digest, which must skip it).
pub use super::digest::CHECKSUM_KEY;

/// safetensors' name for a dtype.
fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "F32",
        DType::F64 => "F64",
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        DType::I64 => "I64",
        DType::U32 => "U32",
        DType::U8 => "U8",
        DType::Bool => "BOOL",
    }
}

/// The tensor-core dtype of a safetensors dtype, if ditto has one.
fn from_safetensors(dtype: Dtype) -> Option<DType> {
    Some(match dtype {
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I64 => DType::I64,
        Dtype::U32 => DType::U32,
        Dtype::U8 => DType::U8,
        Dtype::BOOL => DType::Bool,
        _ => return None,
    })
}

/// The elements of a CPU tensor as little-endian bytes, row-major.
fn tensor_bytes(t: &Tensor) -> Result<Vec<u8>, CheckpointError> {
    fn le<T: Copy, const N: usize>(values: Vec<T>, f: fn(T) -> [u8; N]) -> Vec<u8> {
        values.into_iter().flat_map(f).collect()
    }
    Ok(match t.dtype() {
        DType::F32 => le(t.to_vec::<f32>()?, f32::to_le_bytes),
        DType::F64 => le(t.to_vec::<f64>()?, f64::to_le_bytes),
        DType::F16 => le(t.to_vec::<f16>()?, f16::to_le_bytes),
        DType::BF16 => le(t.to_vec::<bf16>()?, bf16::to_le_bytes),
        DType::I64 => le(t.to_vec::<i64>()?, i64::to_le_bytes),
        DType::U32 => le(t.to_vec::<u32>()?, u32::to_le_bytes),
        DType::U8 => t.to_vec::<u8>()?,
        DType::Bool => le(t.to_vec::<bool>()?, |b| [u8::from(b)]),
    })
}

/// A CPU tensor from little-endian bytes (length already validated by safetensors).
fn bytes_tensor(
    name: &str,
    dtype: DType,
    dims: &[usize],
    data: &[u8],
) -> Result<Tensor, CheckpointError> {
    fn from_le<T: LeElement, const N: usize>(
        data: &[u8],
        dims: &[usize],
        f: fn([u8; N]) -> T,
    ) -> Result<Tensor, CheckpointError> {
        let values = data
            .chunks_exact(N)
            .map(|c| f(c.try_into().expect("chunks of N")))
            .collect::<Vec<T>>();
        Ok(Tensor::from_vec(values, dims, Device::Cpu)?)
    }
    match dtype {
        DType::F32 => from_le(data, dims, f32::from_le_bytes),
        DType::F64 => from_le(data, dims, f64::from_le_bytes),
        DType::F16 => from_le(data, dims, f16::from_le_bytes),
        DType::BF16 => from_le(data, dims, bf16::from_le_bytes),
        DType::I64 => from_le(data, dims, i64::from_le_bytes),
        DType::U32 => from_le(data, dims, u32::from_le_bytes),
        DType::U8 => Ok(Tensor::from_vec(data.to_vec(), dims, Device::Cpu)?),
        DType::Bool => {
            let values = data
                .iter()
                .map(|&b| match b {
                    0 => Ok(false),
                    1 => Ok(true),
                    _ => Err(CheckpointError::Malformed {
                        reason: format!("tensor {name:?}: BOOL byte {b} is neither 0 nor 1"),
                    }),
                })
                .collect::<Result<Vec<bool>, _>>()?;
            Ok(Tensor::from_vec(values, dims, Device::Cpu)?)
        }
    }
}

/// Element types with a little-endian byte form (a local bound for `from_le`).
trait LeElement: tensor_core::Element {}
impl LeElement for f32 {}
impl LeElement for f64 {}
impl LeElement for f16 {}
impl LeElement for bf16 {}
impl LeElement for i64 {}
impl LeElement for u32 {}

/// The file bytes of `tensors` (already on the CPU) with `metadata` plus the format keys.
pub(crate) fn encode(
    tensors: &BTreeMap<String, Tensor>,
    user_metadata: &BTreeMap<String, String>,
) -> Result<Vec<u8>, CheckpointError> {
    let mut entries = tensors
        .iter()
        .map(|(name, t)| Ok((name.as_str(), t.dtype(), t.dims(), tensor_bytes(t)?)))
        .collect::<Result<Vec<_>, CheckpointError>>()?;
    // Descending element size keeps every tensor aligned to its element size.
    entries.sort_by(|a, b| {
        b.1.size_in_bytes()
            .cmp(&a.1.size_in_bytes())
            .then(a.0.cmp(b.0))
    });
    let mut metadata = user_metadata.clone();
    metadata.insert(FORMAT_KEY.into(), FORMAT_NAME.into());
    metadata.insert(VERSION_KEY.into(), FORMAT_VERSION.to_string());
    let checksum = sha256_checksum(
        &metadata,
        entries
            .iter()
            .map(|(n, d, dims, data)| (*n, dtype_name(*d), *dims, data.as_slice())),
    );
    metadata.insert(CHECKSUM_KEY.into(), checksum);

    let json = |s: &str| serde_json::to_string(s).expect("strings always serialise");
    let mut header = String::from("{\"__metadata__\":{");
    let fields: Vec<String> = metadata
        .iter()
        .map(|(k, v)| format!("{}:{}", json(k), json(v)))
        .collect();
    header.push_str(&fields.join(","));
    header.push('}');
    let mut offset = 0usize;
    for (name, dtype, dims, data) in &entries {
        let shape: Vec<String> = dims.iter().map(usize::to_string).collect();
        header.push_str(&format!(
            ",{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
            json(name),
            dtype_name(*dtype),
            shape.join(","),
            offset,
            offset + data.len()
        ));
        offset += data.len();
    }
    header.push('}');
    let mut header = header.into_bytes();
    header.resize(header.len().next_multiple_of(8), b' ');

    let mut out = Vec::with_capacity(8 + header.len() + offset);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    for (_, _, _, data) in &entries {
        out.extend_from_slice(data);
    }
    Ok(out)
}

/// Tensors and metadata parsed from checkpoint bytes.
pub(crate) type Decoded = (BTreeMap<String, Tensor>, BTreeMap<String, String>);

/// Which format versions [`decode`] accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Accept {
    /// Version 2 only (the default).
    Current,
    /// Version 2, or version 1 verified with its CRC-32 (for converting old files).
    CurrentOrV1,
}

/// Parses and verifies checkpoint bytes: safetensors structure, then format and
/// version, then the checksum, then the tensors. Returns the version read too.
pub(crate) fn decode(bytes: &[u8], accept: Accept) -> Result<(Decoded, u32), CheckpointError> {
    check_lengths(bytes)?;
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| parse_error(bytes, &e))?;
    let file = SafeTensors::deserialize(bytes).map_err(|e| parse_error(bytes, &e))?;
    let metadata: BTreeMap<String, String> = header
        .metadata()
        .as_ref()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    if metadata.get(FORMAT_KEY).map(String::as_str) != Some(FORMAT_NAME) {
        return Err(CheckpointError::Malformed {
            reason: format!(
                "not a ditto checkpoint: metadata key {FORMAT_KEY:?} is not {FORMAT_NAME:?}"
            ),
        });
    }
    let version_text = metadata.get(VERSION_KEY).cloned().unwrap_or_default();
    let version = match version_text.as_str() {
        "2" => FORMAT_VERSION,
        "1" if accept == Accept::CurrentOrV1 => LEGACY_FORMAT_VERSION,
        "1" => {
            return Err(CheckpointError::WeakFormatVersion {
                found: LEGACY_FORMAT_VERSION,
            })
        }
        _ => {
            return Err(CheckpointError::UnsupportedVersion {
                found: version_text,
                supported: FORMAT_VERSION,
            })
        }
    };
    let (prefix, digits) = if version == FORMAT_VERSION {
        (SHA256_PREFIX, 64)
    } else {
        (CRC32_PREFIX, 8)
    };
    let stored = metadata
        .get(CHECKSUM_KEY)
        .filter(|v| digest::is_well_formed(v, prefix, digits))
        .cloned()
        .ok_or_else(|| CheckpointError::Malformed {
            reason: format!(
                "metadata key {CHECKSUM_KEY:?} is missing or not \"{prefix}<{digits} lowercase hex digits>\" \
                 (format version {version})"
            ),
        })?;
    let views = file.tensors();
    let mut typed = Vec::with_capacity(views.len());
    for (name, view) in &views {
        let dtype = from_safetensors(view.dtype()).ok_or_else(|| CheckpointError::Malformed {
            reason: format!(
                "tensor {name:?} has dtype {:?}, which ditto does not use",
                view.dtype()
            ),
        })?;
        typed.push((name.as_str(), dtype, view.shape(), view.data()));
    }
    let entries = typed
        .iter()
        .map(|(n, d, dims, data)| (*n, dtype_name(*d), *dims, *data));
    let computed = if version == FORMAT_VERSION {
        sha256_checksum(&metadata, entries)
    } else {
        crc32_checksum(&metadata, entries)
    };
    if computed != stored {
        return Err(CheckpointError::ChecksumMismatch {
            expected: stored,
            found: computed,
        });
    }
    let tensors = typed
        .into_iter()
        .map(|(name, dtype, dims, data)| {
            // safetensors accepts [0, usize::MAX, 2] (zero elements); tensor-core does
            // not (its strides overflow). Name the tensor rather than the shape alone.
            Shape::new(dims).map_err(|e| CheckpointError::Malformed {
                reason: format!("tensor {name:?}: {e}"),
            })?;
            Ok((name.to_string(), bytes_tensor(name, dtype, dims, data)?))
        })
        .collect::<Result<_, CheckpointError>>()?;
    let user_metadata = metadata
        .into_iter()
        .filter(|(k, _)| ![FORMAT_KEY, VERSION_KEY, CHECKSUM_KEY].contains(&k.as_str()))
        .collect();
    Ok(((tensors, user_metadata), version))
}

/// Truncation caught before parsing: too short for the length prefix, or a header
/// length beyond the end of the file.
fn check_lengths(bytes: &[u8]) -> Result<(), CheckpointError> {
    let Some(prefix) = bytes.get(..8) else {
        return Err(CheckpointError::Truncated {
            reason: format!("{} bytes, fewer than the 8-byte header length", bytes.len()),
        });
    };
    let n = u64::from_le_bytes(prefix.try_into().expect("8 bytes"));
    let available = (bytes.len() - 8) as u64;
    if n > available {
        return Err(CheckpointError::Truncated {
            reason: format!(
                "the header length field says {n} bytes but only {available} follow \
                 (the file is cut short, or that field is corrupted)"
            ),
        });
    }
    Ok(())
}

/// Maps a safetensors parse error to `Truncated` (data shorter than the header
/// describes) or `Malformed` (anything else, with safetensors' message).
fn parse_error(bytes: &[u8], error: &safetensors::SafeTensorError) -> CheckpointError {
    if let safetensors::SafeTensorError::MetadataIncompleteBuffer = error {
        if let Some(expected) = described_length(bytes) {
            if (bytes.len() as u64) < expected {
                return CheckpointError::Truncated {
                    reason: format!(
                        "the header describes {expected} bytes but the file has {}",
                        bytes.len()
                    ),
                };
            }
        }
    }
    CheckpointError::Malformed {
        reason: error.to_string(),
    }
}

/// The file length the header describes (8 + header + end of the last tensor), when
/// the header parses as JSON.
fn described_length(bytes: &[u8]) -> Option<u64> {
    let n = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let header = bytes.get(8..8usize.checked_add(usize::try_from(n).ok()?)?)?;
    let value: serde_json::Value = serde_json::from_slice(header).ok()?;
    let end = value
        .as_object()?
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .filter_map(|(_, v)| v.get("data_offsets")?.get(1)?.as_u64())
        .max()
        .unwrap_or(0);
    Some(8 + n + end)
}
