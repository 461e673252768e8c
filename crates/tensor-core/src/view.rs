//! Views and layout changes: `reshape`, `t`, `transpose`, `narrow`, `unsqueeze`,
//! `contiguous`.
//!
//! Views share storage with their source and cost O(rank); only `contiguous` (and
//! `reshape` of a strided view) copy.

use crate::creation::try_with_capacity;
use crate::{CpuStorage, Element, Result, Shape, Storage, Tensor, TensorError};

impl Tensor {
    /// The same elements in row-major order with new dims. A contiguous tensor is viewed
    /// without copying; a strided view is copied to contiguous first. Errors when the
    /// element counts differ.
    pub fn reshape(&self, dims: &[usize]) -> Result<Tensor> {
        let shape = Shape::new(dims)?;
        if shape.elem_count() != self.elem_count() {
            return Err(TensorError::ElementCountMismatch {
                dims: dims.to_vec(),
                expected: shape.elem_count(),
                got: self.elem_count(),
            });
        }
        let source = self.contiguous()?;
        Ok(Tensor::contiguous_over(
            source.storage.clone(),
            shape,
            source.offset,
        ))
    }

    /// The transpose of a 2-D tensor, as a view (no copy). Errors on any other rank.
    pub fn t(&self) -> Result<Tensor> {
        if self.rank() != 2 {
            return Err(TensorError::RankMismatch {
                op: "t",
                expected: 2,
                got: self.rank(),
            });
        }
        self.transpose(0, 1)
    }

    /// A view with dimensions `dim0` and `dim1` swapped (strides swapped, no copy).
    pub fn transpose(&self, dim0: usize, dim1: usize) -> Result<Tensor> {
        self.check_dim("transpose", dim0)?;
        self.check_dim("transpose", dim1)?;
        let mut dims = self.dims().to_vec();
        let mut strides = self.strides.clone();
        dims.swap(dim0, dim1);
        strides.swap(dim0, dim1);
        Ok(Tensor {
            storage: self.storage.clone(),
            shape: Shape::new(&dims)?,
            strides,
            offset: self.offset,
        })
    }

    /// The view of `len` consecutive indices of dimension `dim` starting at `start` (no
    /// copy), like `torch.narrow`. Errors when the range leaves the dimension.
    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Result<Tensor> {
        self.check_dim("narrow", dim)?;
        let size = self.dims()[dim];
        if start.checked_add(len).is_none_or(|end| end > size) {
            return Err(TensorError::InvalidArgument {
                op: "narrow",
                message: format!(
                    "range {start}..{start}+{len} does not fit in dimension {dim} of size {size}"
                ),
            });
        }
        let mut dims = self.dims().to_vec();
        dims[dim] = len;
        let offset = if len == 0 {
            self.offset
        } else {
            self.offset + start * self.strides[dim]
        };
        Ok(Tensor {
            storage: self.storage.clone(),
            shape: Shape::new(&dims)?,
            strides: self.strides.clone(),
            offset,
        })
    }

    /// A view with a new dimension of size 1 inserted at `dim` (`0..=rank`), e.g. to
    /// broadcast a row vector.
    pub fn unsqueeze(&self, dim: usize) -> Result<Tensor> {
        if dim > self.rank() {
            return Err(TensorError::DimOutOfRange {
                op: "unsqueeze",
                dim,
                rank: self.rank(),
            });
        }
        let mut dims = self.dims().to_vec();
        let mut strides = self.strides.clone();
        let stride = strides.get(dim).map_or(1, |&s| s * dims[dim]);
        dims.insert(dim, 1);
        strides.insert(dim, stride);
        Ok(Tensor {
            storage: self.storage.clone(),
            shape: Shape::new(&dims)?,
            strides,
            offset: self.offset,
        })
    }

    /// A row-major tensor with the same elements: `self` (shared) when already
    /// contiguous, otherwise a copy. The result may still start at a non-zero
    /// [`Tensor::storage_offset`]. CUDA views are gathered on the device.
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        match self.storage() {
            Storage::Cpu(storage) => {
                let copy = crate::with_cpu_storage!(storage, v => gather(v, self)?);
                Tensor::from_cpu_storage(copy, self.dims())
            }
            #[cfg(feature = "cuda")]
            Storage::Cuda(_) => crate::ops::cuda::contiguous(self),
        }
    }

    /// Errors unless `dim < rank`.
    pub fn check_dim(&self, op: &'static str, dim: usize) -> Result<()> {
        if dim >= self.rank() {
            return Err(TensorError::DimOutOfRange {
                op,
                dim,
                rank: self.rank(),
            });
        }
        Ok(())
    }
}

/// The elements of `view` (whose storage holds `values`) in row-major order.
fn gather<T: Element>(values: &[T], view: &Tensor) -> Result<CpuStorage> {
    let mut out = try_with_capacity(view.elem_count(), T::DTYPE)?;
    crate::layout::gather_strided(
        values,
        view.dims(),
        view.strides(),
        view.storage_offset(),
        &mut out,
    );
    Ok(T::into_storage(out))
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor, TensorError};

    fn m23() -> Tensor {
        Tensor::from_vec(vec![1f32, 2., 3., 4., 5., 6.], &[2, 3], Device::Cpu).unwrap()
    }

    #[test]
    fn transpose_and_contiguous() {
        let t = m23().t().unwrap();
        assert_eq!(t.dims(), &[3, 2]);
        assert!(!t.is_contiguous());
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![1., 4., 2., 5., 3., 6.]);
        let c = t.contiguous().unwrap();
        assert!(c.is_contiguous());
        assert_eq!(c.to_vec::<f32>().unwrap(), vec![1., 4., 2., 5., 3., 6.]);
        assert!(matches!(
            Tensor::zeros(&[2], DType::F32, Device::Cpu).unwrap().t(),
            Err(TensorError::RankMismatch { .. })
        ));
        assert!(matches!(
            m23().transpose(0, 2),
            Err(TensorError::DimOutOfRange { .. })
        ));
    }

    #[test]
    fn reshape_views_or_copies() {
        let r = m23().reshape(&[3, 2]).unwrap();
        assert_eq!(r.to_vec::<f32>().unwrap(), vec![1., 2., 3., 4., 5., 6.]);
        let r = m23().t().unwrap().reshape(&[6]).unwrap();
        assert_eq!(r.to_vec::<f32>().unwrap(), vec![1., 4., 2., 5., 3., 6.]);
        assert!(matches!(
            m23().reshape(&[4]),
            Err(TensorError::ElementCountMismatch { .. })
        ));
        let row = m23().narrow(0, 1, 1).unwrap().reshape(&[3]).unwrap();
        assert_eq!(row.to_vec::<f32>().unwrap(), vec![4., 5., 6.]);
    }

    #[test]
    fn narrow_and_unsqueeze() {
        let n = m23().narrow(1, 1, 2).unwrap();
        assert_eq!(n.to_vec::<f32>().unwrap(), vec![2., 3., 5., 6.]);
        assert_eq!(m23().narrow(1, 3, 0).unwrap().elem_count(), 0);
        for (dim, start, len) in [(1, 2, 2), (2, 0, 1), (0, usize::MAX, 2)] {
            assert!(m23().narrow(dim, start, len).is_err());
        }
        let u = m23().unsqueeze(1).unwrap();
        assert_eq!(u.dims(), &[2, 1, 3]);
        assert!(u.is_contiguous());
        assert_eq!(m23().unsqueeze(2).unwrap().dims(), &[2, 3, 1]);
        assert!(m23().unsqueeze(3).is_err());
    }
}
