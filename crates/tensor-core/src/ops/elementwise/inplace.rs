//! In-place updates for optimisers: `axpy_`, `scale_`, `copy_from_`.
//!
//! Each first makes the storage unique (copy-on-write), so clones of the tensor, and
//! other views of the same storage, keep their values. Only the elements of this view
//! are written. Same evaluation as the out-of-place ops: `s + (alpha * x)` with `alpha`
//! rounded to the dtype, a multiply then an add, never fused.

use crate::{Element, Result, Tensor};

/// Writes `f(old, i)` into every element of `t`'s view, `i` counting in row-major order.
fn update<T: Element>(op: &'static str, t: &mut Tensor, f: impl Fn(T, usize) -> T) -> Result<()> {
    let (dims, strides, offset, count) = (
        t.dims().to_vec(),
        t.strides().to_vec(),
        t.storage_offset(),
        t.elem_count(),
    );
    let contiguous = t.is_contiguous();
    let values = T::slice_mut(t.cpu_storage_mut(op)?).expect("callers check the dtype");
    if contiguous {
        for (i, v) in values[offset..offset + count].iter_mut().enumerate() {
            *v = f(*v, i);
        }
    } else {
        let positions = crate::layout::StridedIndex::new(&dims, &strides, offset);
        for (i, p) in positions.enumerate() {
            values[p] = f(values[p], i);
        }
    }
    Ok(())
}

impl Tensor {
    /// `self += alpha * x` in place (`torch.Tensor.add_(x, alpha=alpha)`). `x` must have
    /// the same dims, dtype and device.
    #[track_caller]
    pub fn axpy_(&mut self, alpha: f64, x: &Tensor) -> Result<()> {
        audited_in_place!("axpy_", self, [x], {
            const OP: &str = "axpy_";
            self.require_compatible(OP, x)?;
            self.require_same_dims(OP, x)?;
            on_cuda!(self => crate::ops::cuda::axpy_(self, alpha, x));
            self.require_cpu(OP)?;
            with_float_dtype!(self.dtype(), OP, T => {
                let a = T::from_f64(alpha);
                if self.is_contiguous() && x.is_contiguous() {
                    let xs = x.as_slice::<T>()?;
                    for (s, &x) in self.as_mut_slice::<T>()?.iter_mut().zip(xs) {
                        *s += a * x;
                    }
                    return Ok(());
                }
                let xs = x.to_vec::<T>()?;
                update::<T>(OP, self, |s, i| s + a * xs[i])
            })
        })
    }

    /// `self += rhs` in place, `rhs` broadcast to this tensor's dims (the result must
    /// have this tensor's dims). The same values as [`Tensor::add`].
    #[track_caller]
    pub fn add_(&mut self, rhs: &Tensor) -> Result<()> {
        audited_in_place!("add_", self, [rhs], {
            const OP: &str = "add_";
            self.require_compatible(OP, rhs)?;
            let out = crate::ops::elementwise::binary::broadcast_dims(OP, self.dims(), rhs.dims())?;
            if out != self.dims() {
                return Err(crate::TensorError::ShapeMismatch {
                    op: OP,
                    lhs: self.dims().to_vec(),
                    rhs: rhs.dims().to_vec(),
                });
            }
            on_cuda!(self => {
                let sum = self.add(rhs)?;
                crate::ops::cuda::write_into(self, &sum)
            });
            self.require_cpu(OP)?;
            with_float_dtype!(self.dtype(), OP, T => {
                let n = crate::ops::elementwise::binary::suffix_len(rhs, &out);
                if let (Some(n @ 1..), true) = (n, self.is_contiguous()) {
                    let b = rhs.as_slice::<T>()?;
                    let dst = self.as_mut_slice::<T>()?;
                    if let [s] = *b {
                        dst.iter_mut().for_each(|x| *x += s);
                        return Ok(());
                    }
                    for row in dst.chunks_exact_mut(n) {
                        for (x, &y) in row.iter_mut().zip(b) {
                            *x += y;
                        }
                    }
                    return Ok(());
                }
                let sum = self.add(rhs)?;
                self.copy_from_(&sum)
            })
        })
    }

    /// `self *= s` in place.
    #[track_caller]
    pub fn scale_(&mut self, s: f64) -> Result<()> {
        audited_in_place!("scale_", self, [], {
            const OP: &str = "scale_";
            on_cuda!(self => {
                let scaled = self.mul_scalar(s)?;
                crate::ops::cuda::write_into(self, &scaled)
            });
            self.require_cpu(OP)?;
            with_float_dtype!(self.dtype(), OP, T => {
                let s = T::from_f64(s);
                update::<T>(OP, self, |v, _| v * s)
            })
        })
    }

    /// Overwrites this tensor's elements with `src`'s (same dims, dtype and device; any
    /// dtype).
    #[track_caller]
    pub fn copy_from_(&mut self, src: &Tensor) -> Result<()> {
        audited_in_place!("copy_from_", self, [src], {
            const OP: &str = "copy_from_";
            self.require_compatible(OP, src)?;
            self.require_same_dims(OP, src)?;
            on_cuda!(self => crate::ops::cuda::write_into(self, src));
            self.require_cpu(OP)?;
            with_dtype!(self.dtype(), T => {
                let xs = src.to_vec::<T>()?;
                update::<T>(OP, self, |_, i| xs[i])
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor, TensorError};

    #[test]
    fn axpy_is_copy_on_write() {
        let w = Tensor::from_vec(vec![1f32, 2., 3.], &[3], Device::Cpu).unwrap();
        let g = Tensor::from_vec(vec![0.5f32, 0.5, 0.5], &[3], Device::Cpu).unwrap();
        let mut updated = w.clone();
        updated.axpy_(-0.1, &g).unwrap();
        assert_eq!(w.to_vec::<f32>().unwrap(), vec![1., 2., 3.]);
        let want: Vec<f32> = [1f32, 2., 3.].iter().map(|&s| s + -0.1f32 * 0.5).collect();
        assert_eq!(updated.to_vec::<f32>().unwrap(), want);
        let mut self_ref = w.clone();
        self_ref.axpy_(1.0, &w).unwrap();
        assert_eq!(self_ref.to_vec::<f32>().unwrap(), vec![2., 4., 6.]);
    }

    #[test]
    fn scale_and_copy_write_only_the_view() {
        let base = Tensor::from_vec(vec![1f64, 2., 3., 4.], &[2, 2], Device::Cpu).unwrap();
        let mut col = base.t().unwrap().narrow(0, 1, 1).unwrap();
        col.scale_(10.0).unwrap();
        assert_eq!(col.to_vec::<f64>().unwrap(), vec![20., 40.]);
        assert_eq!(base.to_vec::<f64>().unwrap(), vec![1., 2., 3., 4.]);
        let mut dst = Tensor::zeros(&[2, 2], DType::F64, Device::Cpu).unwrap();
        dst.copy_from_(&base.t().unwrap()).unwrap();
        assert_eq!(dst.to_vec::<f64>().unwrap(), vec![1., 3., 2., 4.]);
        let wrong = Tensor::zeros(&[4], DType::F64, Device::Cpu).unwrap();
        assert!(matches!(
            dst.copy_from_(&wrong),
            Err(TensorError::ShapeMismatch { .. })
        ));
    }
}
