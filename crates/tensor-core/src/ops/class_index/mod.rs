//! `gather` and `one_hot`: picking elements by an i64 index tensor, the two steps of a
//! classification loss (each row's value at its target class, and the target as a row of
//! 0s and 1s).
//!
//! Why here and on the device: `cross_entropy` used to pick its rows with `index_select`
//! on host indices, which on a GPU is a download of the log-probabilities, a wait and an
//! upload in every training step. With these ops the targets go to the device once, with
//! the batch, and both picks are kernels. Both only copy or write exact constants, so
//! the CPU and CUDA results are the same bits.
//!
//! Index values are checked on the CPU (an error naming the position). On a GPU they are
//! not: that would read the index back to the host and wait for it, the cost these ops
//! exist to remove. There an index outside its dimension gives NaN (a whole NaN row for
//! `one_hot`), never a read outside the tensor. Callers that must reject bad indices
//! check them where they are on the host (as `cross_entropy` does with its targets).

#[cfg(feature = "cuda")]
pub(crate) mod cuda;

use crate::{DType, Element, Result, Tensor, TensorError};

/// Errors unless `index` is an i64 tensor on `this`'s device.
fn check_index(op: &'static str, this: &Tensor, index: &Tensor) -> Result<()> {
    if index.dtype() != DType::I64 {
        return Err(TensorError::DTypeMismatch {
            op,
            expected: DType::I64,
            got: index.dtype(),
        });
    }
    if this.device() != index.device() {
        return Err(TensorError::DeviceMismatch {
            op,
            lhs: this.device(),
            rhs: index.device(),
        });
    }
    Ok(())
}

/// The error for index element `position` holding `value`, outside `0..size`.
fn out_of_range(
    op: &'static str,
    position: usize,
    value: i64,
    dim: usize,
    size: usize,
) -> TensorError {
    TensorError::IndexValueOutOfRange {
        op,
        position,
        value,
        dim,
        size,
    }
}

impl Tensor {
    /// `torch.gather(self, dim, index)`: an output shaped like `index` (i64, `self`'s rank,
    /// on `self`'s device) whose element at coordinates `p` is `self` at `p` with
    /// coordinate `dim` replaced by `index[p]`. Except along `dim`, `index` must fit
    /// inside `self`. f32 and f64. On the CPU an index value outside `0..self.dims()[dim]`
    /// is [`TensorError::IndexValueOutOfRange`]; on a GPU it gives NaN (see the module
    /// docs).
    #[track_caller]
    pub fn gather(&self, dim: usize, index: &Tensor) -> Result<Tensor> {
        audited!("gather", [self, index], {
            const OP: &str = "gather";
            self.check_dim(OP, dim)?;
            check_index(OP, self, index)?;
            if index.rank() != self.rank() {
                return Err(TensorError::RankMismatch {
                    op: OP,
                    expected: self.rank(),
                    got: index.rank(),
                });
            }
            let fits = (0..self.rank()).all(|d| d == dim || index.dims()[d] <= self.dims()[d]);
            if !fits {
                return Err(TensorError::ShapeMismatch {
                    op: OP,
                    lhs: self.dims().to_vec(),
                    rhs: index.dims().to_vec(),
                });
            }
            on_cuda!(self => crate::ops::cuda::gather_index(self, dim, index));
            with_float_dtype!(self.dtype(), OP, T => {
                let src = self.contiguous()?;
                let values = src.as_slice::<T>()?;
                let picks = index.contiguous()?;
                let picks = picks.as_slice::<i64>()?;
                let size = self.dims()[dim];
                let src_strides = src.strides();
                let mut out = crate::creation::try_with_capacity::<T>(picks.len(), T::DTYPE)?;
                let mut coords = vec![0usize; index.rank()];
                for (position, &k) in picks.iter().enumerate() {
                    let picked = usize::try_from(k)
                        .ok()
                        .filter(|&k| k < size)
                        .ok_or_else(|| out_of_range(OP, position, k, dim, size))?;
                    let mut at = 0;
                    for (d, (&c, &stride)) in coords.iter().zip(src_strides).enumerate() {
                        at += if d == dim { picked } else { c } * stride;
                    }
                    out.push(values[at]);
                    // The next row-major coordinates of `index`.
                    for d in (0..coords.len()).rev() {
                        coords[d] += 1;
                        if coords[d] < index.dims()[d] {
                            break;
                        }
                        coords[d] = 0;
                    }
                }
                Tensor::from_cpu_storage(T::into_storage(out), index.dims())
            })
        })
    }

    /// `torch.nn.functional.one_hot(self, classes)` in `dtype` (f32 or f64; PyTorch
    /// gives i64 and leaves the conversion to the caller): `self` is an i64 tensor, the
    /// output has its dims plus one of `classes`, with 1 at each index and 0 elsewhere.
    /// On the CPU a value outside `0..classes` is [`TensorError::IndexValueOutOfRange`];
    /// on a GPU its row is NaN (see the module docs).
    #[track_caller]
    pub fn one_hot(&self, classes: usize, dtype: DType) -> Result<Tensor> {
        audited!("one_hot", [self], {
            const OP: &str = "one_hot";
            if self.dtype() != DType::I64 {
                return Err(TensorError::DTypeMismatch {
                    op: OP,
                    expected: DType::I64,
                    got: self.dtype(),
                });
            }
            let mut dims = self.dims().to_vec();
            dims.push(classes);
            crate::Shape::new(&dims)?;
            on_cuda!(self => crate::ops::cuda::one_hot(self, &dims, dtype));
            with_float_dtype!(dtype, OP, T => {
                let rows = self.contiguous()?;
                let rows = rows.as_slice::<i64>()?;
                let mut out = crate::creation::try_zeroed_vec::<T>(rows.len() * classes)?;
                for (position, &k) in rows.iter().enumerate() {
                    let class = usize::try_from(k)
                        .ok()
                        .filter(|&k| k < classes)
                        .ok_or_else(|| out_of_range(OP, position, k, self.rank(), classes))?;
                    out[position * classes + class] = 1.0;
                }
                Tensor::from_cpu_storage(T::into_storage(out), &dims)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor, TensorError};

    fn index(values: Vec<i64>, dims: &[usize]) -> Tensor {
        Tensor::from_vec(values, dims, Device::Cpu).unwrap()
    }

    #[test]
    fn gather_picks_along_either_dimension() {
        let x =
            Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], Device::Cpu).unwrap();
        let rows = x.gather(1, &index(vec![2, 0], &[2, 1])).unwrap();
        assert_eq!(rows.to_vec::<f32>().unwrap(), [3.0, 4.0]);
        assert_eq!(rows.dims(), [2, 1]);
        let cols = x.gather(0, &index(vec![1, 0, 1], &[1, 3])).unwrap();
        assert_eq!(cols.to_vec::<f32>().unwrap(), [4.0, 2.0, 6.0]);
        // A transposed (strided) source reads the same logical elements.
        let t = x.transpose(0, 1).unwrap();
        let picked = t.gather(1, &index(vec![1, 0, 1], &[3, 1])).unwrap();
        assert_eq!(picked.to_vec::<f32>().unwrap(), [4.0, 2.0, 6.0]);
    }

    #[test]
    fn gather_rejects_bad_indices_and_shapes() {
        let x = Tensor::zeros(&[2, 3], DType::F32, Device::Cpu).unwrap();
        let err = x.gather(1, &index(vec![0, 3], &[2, 1])).unwrap_err();
        assert!(matches!(
            err,
            TensorError::IndexValueOutOfRange {
                position: 1,
                value: 3,
                size: 3,
                ..
            }
        ));
        assert!(x.gather(1, &index(vec![-1, 0], &[2, 1])).is_err());
        assert!(x.gather(1, &index(vec![0, 0, 0], &[3, 1])).is_err());
        assert!(x.gather(1, &index(vec![0, 0], &[2])).is_err());
        assert!(x.gather(2, &index(vec![0, 0], &[2, 1])).is_err());
        let wrong_dtype = Tensor::zeros(&[2, 1], DType::F32, Device::Cpu).unwrap();
        assert!(x.gather(1, &wrong_dtype).is_err());
    }

    #[test]
    fn one_hot_marks_each_class() {
        let hot = index(vec![2, 0], &[2]).one_hot(3, DType::F64).unwrap();
        assert_eq!(hot.dims(), [2, 3]);
        assert_eq!(hot.to_vec::<f64>().unwrap(), [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]);
        let err = index(vec![0, 3], &[2]).one_hot(3, DType::F32).unwrap_err();
        assert!(matches!(
            err,
            TensorError::IndexValueOutOfRange { position: 1, .. }
        ));
        assert!(index(vec![0], &[1]).one_hot(3, DType::I64).is_err());
    }
}
