//! Copies that pick or join whole slices: `index_select` and `cat`.
//!
//! On the CPU both work on contiguous copies of their inputs and copy `inner`-sized runs,
//! so a data loader gathering a batch of rows pays one `memcpy` per row; CUDA tensors
//! stay on their device (`ops::cuda::layout`).

use crate::creation::try_with_capacity;
use crate::{Device, Element, Result, Shape, Tensor, TensorError};

/// Sizes of the dimensions before `dim` and after `dim`, multiplied out.
fn outer_inner(dims: &[usize], dim: usize) -> (usize, usize) {
    (
        dims[..dim].iter().product(),
        dims[dim + 1..].iter().product(),
    )
}

impl Tensor {
    /// The slices `indices` of dimension `dim`, in the order given (repeats allowed), like
    /// `torch.index_select`. Errors when `dim` or an index is out of range.
    #[track_caller]
    pub fn index_select(&self, dim: usize, indices: &[usize]) -> Result<Tensor> {
        // The audit sees the indices as an i64 input: they decide the output as much as
        // `self` does.
        let index_input = if crate::audit::is_enabled() {
            let as_i64 = indices.iter().map(|&i| i as i64).collect();
            Some(Tensor::from_cpu_storage(
                crate::CpuStorage::I64(as_i64),
                &[indices.len()],
            )?)
        } else {
            None
        };
        let inputs: Vec<&Tensor> = std::iter::once(self).chain(index_input.as_ref()).collect();
        let recorder = crate::audit::OpRecorder::begin("index_select", &inputs);
        recorder.finish_result(self.index_select_unrecorded(dim, indices))
    }

    /// [`index_select`](Self::index_select) along `dim` with indices checked already
    /// against its size ([`CheckedIndex`](crate::CheckedIndex), placed on this tensor's
    /// device): on CUDA the kernel reads them where they are, with no copy either way.
    #[track_caller]
    pub fn index_select_checked(&self, dim: usize, index: &crate::CheckedIndex) -> Result<Tensor> {
        let index_input = match crate::audit::is_enabled() {
            true => Some(index.host_tensor()?),
            false => None,
        };
        let inputs: Vec<&Tensor> = std::iter::once(self).chain(index_input.as_ref()).collect();
        let recorder = crate::audit::OpRecorder::begin("index_select", &inputs);
        let result = (|| {
            self.check_dim("index_select", dim)?;
            index.require_fits("index_select", self.dims()[dim], self.device())?;
            #[cfg(feature = "cuda")]
            if self.device().is_cuda() {
                let mut out_dims = self.dims().to_vec();
                out_dims[dim] = index.len();
                Shape::new(&out_dims)?;
                let [words, _, _] = index.device_parts()?;
                return crate::ops::cuda::index_select_from(self, dim, &words, &out_dims);
            }
            self.index_select_unrecorded(dim, index.as_slice())
        })();
        recorder.finish_result(result)
    }

    fn index_select_unrecorded(&self, dim: usize, indices: &[usize]) -> Result<Tensor> {
        self.check_dim("index_select", dim)?;
        let size = self.dims()[dim];
        if let Some(&index) = indices.iter().find(|&&i| i >= size) {
            return Err(TensorError::IndexOutOfRange {
                op: "index_select",
                index,
                dim,
                size,
            });
        }
        let mut out_dims = self.dims().to_vec();
        out_dims[dim] = indices.len();
        Shape::new(&out_dims)?;
        #[cfg(feature = "cuda")]
        if self.device().is_cuda() {
            return crate::ops::cuda::index_select(self, dim, indices, &out_dims);
        }
        let host = self.moved_to(Device::Cpu)?.contiguous()?;
        let (outer, inner) = outer_inner(self.dims(), dim);
        let storage = with_dtype!(self.dtype(), T => {
            let src = host.as_slice::<T>()?;
            let mut out = try_with_capacity::<T>(outer * indices.len() * inner, T::DTYPE)?;
            for o in 0..outer {
                for &i in indices {
                    let start = (o * size + i) * inner;
                    out.extend_from_slice(&src[start..start + inner]);
                }
            }
            T::into_storage(out)
        });
        Tensor::from_cpu_storage(storage, &out_dims)?.moved_to(self.device())
    }

    /// Joins tensors along `dim`, like `torch.cat`. All must share dtype, device, rank
    /// and every dimension except `dim`. Errors on an empty list or any disagreement.
    #[track_caller]
    pub fn cat(tensors: &[Tensor], dim: usize) -> Result<Tensor> {
        let inputs: Vec<&Tensor> = if crate::audit::is_enabled() {
            tensors.iter().collect()
        } else {
            Vec::new()
        };
        let recorder = crate::audit::OpRecorder::begin("cat", &inputs);
        recorder.finish_result(Tensor::cat_unrecorded(tensors, dim))
    }

    fn cat_unrecorded(tensors: &[Tensor], dim: usize) -> Result<Tensor> {
        let first = tensors
            .first()
            .ok_or_else(|| TensorError::InvalidArgument {
                op: "cat",
                message: "expected at least one tensor, got an empty list".into(),
            })?;
        first.check_dim("cat", dim)?;
        for t in &tensors[1..] {
            check_cat_compatible(first, t, dim)?;
        }
        let mut out_dims = first.dims().to_vec();
        out_dims[dim] = tensors
            .iter()
            .try_fold(0usize, |acc, t| acc.checked_add(t.dims()[dim]))
            .ok_or_else(|| TensorError::ShapeOverflow {
                dims: first.dims().to_vec(),
            })?;
        Shape::new(&out_dims)?;
        #[cfg(feature = "cuda")]
        if let Some(joined) = cat_on_device(tensors, dim, &out_dims)? {
            return Ok(joined);
        }
        let hosts = tensors
            .iter()
            .map(|t| t.moved_to(Device::Cpu)?.contiguous())
            .collect::<Result<Vec<_>>>()?;
        let (outer, _) = outer_inner(first.dims(), dim);
        let total: usize = out_dims.iter().product();
        let storage = with_dtype!(first.dtype(), T => {
            let slices = hosts
                .iter()
                .map(|t| t.as_slice::<T>())
                .collect::<Result<Vec<_>>>()?;
            let mut out = try_with_capacity::<T>(total, T::DTYPE)?;
            for o in 0..outer {
                for src in &slices {
                    // Each input contributes one run of `dims[dim] * inner` per outer index.
                    let run = src.len() / outer.max(1);
                    out.extend_from_slice(&src[o * run..(o + 1) * run]);
                }
            }
            T::into_storage(out)
        });
        Tensor::from_cpu_storage(storage, &out_dims)?.moved_to(first.device())
    }
}

/// Errors unless `t` can be concatenated to `first` along `dim`.
fn check_cat_compatible(first: &Tensor, t: &Tensor, dim: usize) -> Result<()> {
    if t.dtype() != first.dtype() {
        return Err(TensorError::DTypeMismatch {
            op: "cat",
            expected: first.dtype(),
            got: t.dtype(),
        });
    }
    if t.device() != first.device() {
        return Err(TensorError::DeviceMismatch {
            op: "cat",
            lhs: first.device(),
            rhs: t.device(),
        });
    }
    let same_other_dims = t.rank() == first.rank()
        && (0..t.rank()).all(|d| d == dim || t.dims()[d] == first.dims()[d]);
    if !same_other_dims {
        return Err(TensorError::ShapeMismatch {
            op: "cat",
            lhs: first.dims().to_vec(),
            rhs: t.dims().to_vec(),
        });
    }
    Ok(())
}

/// `cat` of CUDA tensors on the device (a trip through the host would wait for the
/// device): when each input is one run of the output (every dimension before `dim` is 1,
/// e.g. DDP's flattened gradient buckets every step), one device-to-device copy per
/// input; otherwise one scatter kernel per input. `None` for CPU tensors.
#[cfg(feature = "cuda")]
fn cat_on_device(tensors: &[Tensor], dim: usize, out_dims: &[usize]) -> Result<Option<Tensor>> {
    let Device::Cuda(ordinal) = tensors[0].device() else {
        return Ok(None);
    };
    if out_dims[..dim].iter().any(|&d| d != 1) {
        return crate::ops::cuda::cat(tensors, dim, out_dims).map(Some);
    }
    let total: usize = out_dims.iter().product();
    let mut out = crate::cuda::CudaStorage::alloc_uninit(ordinal, tensors[0].dtype(), total)?;
    let mut at = 0;
    for t in tensors {
        let t = t.contiguous()?;
        let n = t.elem_count();
        if n > 0 {
            let crate::Storage::Cuda(src) = t.storage() else {
                return Ok(None);
            };
            out.copy_elements_from(at, src, t.storage_offset(), n)?;
        }
        at += n;
    }
    Ok(Some(Tensor::from_storage(
        crate::Storage::Cuda(out),
        out_dims,
    )?))
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor, TensorError};

    fn m23() -> Tensor {
        Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], &[2, 3], Device::Cpu).unwrap()
    }

    #[test]
    fn index_select_rows_and_columns() {
        let rows = m23().index_select(0, &[1, 1, 0]).unwrap();
        assert_eq!(rows.dims(), &[3, 3]);
        assert_eq!(
            rows.to_vec::<i64>().unwrap(),
            vec![4, 5, 6, 4, 5, 6, 1, 2, 3]
        );
        let cols = m23().t().unwrap().index_select(1, &[1]).unwrap();
        assert_eq!(cols.to_vec::<i64>().unwrap(), vec![4, 5, 6]);
        assert_eq!(m23().index_select(0, &[]).unwrap().dims(), &[0, 3]);
        assert!(matches!(
            m23().index_select(0, &[2]),
            Err(TensorError::IndexOutOfRange {
                index: 2,
                size: 2,
                ..
            })
        ));
        assert!(matches!(
            m23().index_select(2, &[0]),
            Err(TensorError::DimOutOfRange { .. })
        ));
    }

    #[test]
    fn cat_along_each_dim() {
        let a = m23();
        let b = Tensor::from_vec(vec![7i64, 8, 9], &[1, 3], Device::Cpu).unwrap();
        let c = Tensor::cat(&[a.clone(), b.clone()], 0).unwrap();
        assert_eq!(c.dims(), &[3, 3]);
        assert_eq!(c.to_vec::<i64>().unwrap(), (1..=9).collect::<Vec<_>>());
        let d = Tensor::cat(&[a.clone(), a.narrow(1, 0, 1).unwrap()], 1).unwrap();
        assert_eq!(d.to_vec::<i64>().unwrap(), vec![1, 2, 3, 1, 4, 5, 6, 4]);
        assert!(matches!(
            Tensor::cat(&[a.clone(), b.t().unwrap()], 0),
            Err(TensorError::ShapeMismatch { .. })
        ));
        let f = Tensor::zeros(&[1, 3], DType::F32, Device::Cpu).unwrap();
        assert!(matches!(
            Tensor::cat(&[a, f], 0),
            Err(TensorError::DTypeMismatch { .. })
        ));
        assert!(Tensor::cat(&[], 0).is_err());
        let huge = Tensor::zeros(&[usize::MAX / 2 + 1, 0], DType::U8, Device::Cpu).unwrap();
        assert!(matches!(
            Tensor::cat(&[huge.clone(), huge], 0),
            Err(TensorError::ShapeOverflow { .. })
        ));
    }
}
