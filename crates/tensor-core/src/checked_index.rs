//! `CheckedIndex`: row indices checked once, on the host, against the size of the
//! dimension they index, and placed on a device with their counting sort, for an
//! `index_select` forward and an `index_add` backward that read nothing back.
//!
//! Why: [`Tensor::index_select`] and [`Tensor::index_add`] must check every index
//! before a kernel uses it (an index out of range would read or write past a buffer).
//! Given an index tensor on a GPU, that check is a copy to the host and a wait for the
//! device, and the deterministic `index_add` then uploads the contributions sorted by
//! target. An embedding does both every training step, with indices (token ids) that
//! were made on the host in the first place. Checking them there, before the upload,
//! and uploading the indices together with their sort, turns those two waits and three
//! uploads into one upload, and the step never waits for the device.

use crate::ops::accumulate::rows_by_target;
use crate::{DType, Device, Result, Tensor, TensorError};

/// Indices each `< bound`, on a device: for CUDA one buffer of u64 words holding the
/// indices, then the `bound + 1` starts and the positions of their stable counting sort
/// by target (`ops::accumulate::rows_by_target`, what the deterministic `index_add`
/// walks), uploaded in one copy.
#[derive(Clone, Debug)]
pub struct CheckedIndex {
    host: Vec<usize>,
    bound: usize,
    device: Device,
    /// CUDA: `[index (len) | starts (bound + 1) | positions (len)]` as I64 words. (Read
    /// only by the CUDA paths: a build without them never places indices on a GPU.)
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    words: Option<Tensor>,
}

/// `IndexValueOutOfRange` naming the first index `>= bound`.
fn check_bound(op: &'static str, indices: &[usize], bound: usize) -> Result<()> {
    match indices.iter().enumerate().find(|(_, &i)| i >= bound) {
        Some((position, &value)) => Err(TensorError::IndexValueOutOfRange {
            op,
            position,
            value: i64::try_from(value).unwrap_or(i64::MAX),
            dim: 0,
            size: bound,
        }),
        None => Ok(()),
    }
}

/// `[index | starts | positions]`, the words a device holds (see [`CheckedIndex`]).
fn device_words(op: &'static str, indices: &[usize], bound: usize) -> Result<Vec<i64>> {
    let (starts, positions) = rows_by_target(indices, bound);
    let mut words = Vec::new();
    words
        .try_reserve_exact(2 * indices.len() + starts.len())
        .map_err(|_| TensorError::InvalidArgument {
            op,
            message: format!("{} indices do not fit in memory", indices.len()),
        })?;
    words.extend(
        indices
            .iter()
            .chain(&starts)
            .chain(&positions)
            .map(|&v| v as i64),
    );
    Ok(words)
}

impl CheckedIndex {
    /// Checks `indices` against `bound` (each must be `< bound`) and places them on
    /// `device`. `IndexValueOutOfRange` names the first bad one (as `dim` 0 of a
    /// dimension of `bound` rows); nothing is uploaded then.
    pub fn new(indices: Vec<usize>, bound: usize, device: Device) -> Result<Self> {
        check_bound("CheckedIndex::new", &indices, bound)?;
        let words = match device {
            Device::Cpu => None,
            #[allow(unreachable_patterns)]
            _ => {
                let words = device_words("CheckedIndex::new", &indices, bound)?;
                let n = words.len();
                Some(Tensor::from_vec(words, &[n], device)?)
            }
        };
        Ok(CheckedIndex {
            host: indices,
            bound,
            device,
            words,
        })
    }

    /// Replaces the indices with `indices` (as many, each `< bound`), written into the
    /// same device buffer in one upload and shared with every clone: the token ids of a
    /// CUDA graph's step, whose captured kernels read that buffer on each replay.
    /// Nothing changes on an error.
    pub fn refill(&mut self, indices: Vec<usize>) -> Result<()> {
        const OP: &str = "CheckedIndex::refill";
        if indices.len() != self.host.len() {
            return Err(TensorError::InvalidArgument {
                op: OP,
                message: format!(
                    "{} indices in place of {}: a refill keeps the count",
                    indices.len(),
                    self.host.len()
                ),
            });
        }
        check_bound(OP, &indices, self.bound)?;
        if let Some(buffer) = &self.words {
            let words = device_words(OP, &indices, self.bound)?;
            let n = words.len();
            buffer.copy_from_host_shared(&Tensor::from_vec(words, &[n], Device::Cpu)?)?;
        }
        self.host = indices;
        Ok(())
    }

    /// [`new`](Self::new) from an i64 tensor of any shape (flattened), read on the host
    /// (a wait for the device if it is on one).
    pub fn from_tensor(index: &Tensor, bound: usize, device: Device) -> Result<Self> {
        if index.dtype() != DType::I64 {
            return Err(TensorError::DTypeMismatch {
                op: "CheckedIndex::from_tensor",
                expected: DType::I64,
                got: index.dtype(),
            });
        }
        let values = index
            .to_device(Device::Cpu)?
            .contiguous()?
            .to_vec::<i64>()?;
        let mut indices = Vec::with_capacity(values.len());
        for (position, &value) in values.iter().enumerate() {
            match usize::try_from(value) {
                Ok(v) if v < bound => indices.push(v),
                _ => {
                    return Err(TensorError::IndexValueOutOfRange {
                        op: "CheckedIndex::from_tensor",
                        position,
                        value,
                        dim: 0,
                        size: bound,
                    })
                }
            }
        }
        CheckedIndex::new(indices, bound, device)
    }

    /// The indices, on the host.
    #[must_use]
    pub fn as_slice(&self) -> &[usize] {
        &self.host
    }

    /// How many indices.
    #[must_use]
    pub fn len(&self) -> usize {
        self.host.len()
    }

    /// True without indices.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.host.is_empty()
    }

    /// The size every index is below.
    #[must_use]
    pub fn bound(&self) -> usize {
        self.bound
    }

    /// Where the indices are placed.
    #[must_use]
    pub fn device(&self) -> Device {
        self.device
    }

    /// The indices as an i64 tensor on the host (the audit's view of them).
    pub(crate) fn host_tensor(&self) -> Result<Tensor> {
        let values = self.host.iter().map(|&i| i as i64).collect();
        Tensor::from_vec(values, &[self.host.len()], Device::Cpu)
    }

    /// Errors unless these indices index `size` rows on `device`.
    pub(crate) fn require_fits(&self, op: &'static str, size: usize, device: Device) -> Result<()> {
        if self.bound != size || self.device != device {
            return Err(TensorError::InvalidArgument {
                op,
                message: format!(
                    "the index was checked against {} rows on {}, the tensor has {size} rows on {device}",
                    self.bound, self.device
                ),
            });
        }
        Ok(())
    }

    /// The device words: `(indices, starts, positions)` as views of the one buffer.
    #[cfg(feature = "cuda")]
    pub(crate) fn device_parts(&self) -> Result<[Tensor; 3]> {
        let words = self.words.as_ref().ok_or(TensorError::InvalidArgument {
            op: "CheckedIndex",
            message: "the index was placed on the CPU".into(),
        })?;
        let (n, starts) = (self.host.len(), self.bound + 1);
        Ok([
            words.narrow(0, 0, n)?,
            words.narrow(0, n, starts)?,
            words.narrow(0, n + starts, n)?,
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refill keeps the count and the bound, and changes nothing when refused.
    #[test]
    fn a_refill_is_checked_and_keeps_its_count() {
        let mut index = CheckedIndex::new(vec![2, 0, 2], 3, Device::Cpu).unwrap();
        index.refill(vec![1, 1, 0]).unwrap();
        assert_eq!(index.as_slice(), &[1, 1, 0]);
        assert!(matches!(
            index.refill(vec![0, 1]),
            Err(TensorError::InvalidArgument { .. })
        ));
        assert!(matches!(
            index.refill(vec![0, 1, 3]),
            Err(TensorError::IndexValueOutOfRange {
                position: 2,
                value: 3,
                ..
            })
        ));
        assert_eq!(index.as_slice(), &[1, 1, 0]);
    }

    #[test]
    fn indices_are_checked_before_anything_is_placed() {
        let index = CheckedIndex::new(vec![2, 0, 2], 3, Device::Cpu).unwrap();
        assert_eq!(index.as_slice(), &[2, 0, 2]);
        assert_eq!((index.len(), index.bound()), (3, 3));
        assert!(matches!(
            CheckedIndex::new(vec![0, 3], 3, Device::Cpu),
            Err(TensorError::IndexValueOutOfRange {
                position: 1,
                value: 3,
                ..
            })
        ));
        let t = Tensor::from_vec(vec![1i64, -1], &[2], Device::Cpu).unwrap();
        assert!(matches!(
            CheckedIndex::from_tensor(&t, 4, Device::Cpu),
            Err(TensorError::IndexValueOutOfRange {
                position: 1,
                value: -1,
                ..
            })
        ));
        let f = Tensor::from_vec(vec![1.0f32], &[1], Device::Cpu).unwrap();
        assert!(CheckedIndex::from_tensor(&f, 4, Device::Cpu).is_err());
    }
}
