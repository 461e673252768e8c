//! Reading elements out of a tensor, and typed views of CPU buffers for other crates.

use crate::{CpuStorage, DType, Device, Element, Result, Storage, Tensor, TensorError};

impl Tensor {
    /// The host buffer behind a CPU tensor: the whole storage, which a view may only
    /// partly cover (use [`Tensor::storage_offset`] and [`Tensor::strides`]). Errors for
    /// a tensor on a CUDA device.
    pub fn cpu_storage(&self) -> Result<&CpuStorage> {
        match self.storage() {
            Storage::Cpu(s) => Ok(s),
            #[allow(unreachable_patterns)]
            _ => Err(TensorError::WrongDevice {
                op: "cpu_storage",
                expected: Device::Cpu,
                got: self.device(),
            }),
        }
    }

    /// The elements of a contiguous CPU tensor as a typed slice, without copying. Errors
    /// when `T` is not the dtype, the tensor is on a CUDA device, or it is a strided view
    /// (call [`Tensor::contiguous`] first).
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        self.check_dtype::<T>("as_slice")?;
        self.check_contiguous("as_slice")?;
        let values = T::slice(self.cpu_storage()?).expect("dtype checked above");
        Ok(&values[self.offset..self.offset + self.elem_count()])
    }

    /// The elements of a contiguous CPU tensor as a mutable typed slice. The storage is
    /// copied first if other tensors share it, so they keep their values.
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T]> {
        self.check_dtype::<T>("as_mut_slice")?;
        self.check_contiguous("as_mut_slice")?;
        let (offset, count) = (self.offset, self.elem_count());
        let values = T::slice_mut(self.cpu_storage_mut("as_mut_slice")?).expect("dtype checked");
        Ok(&mut values[offset..offset + count])
    }

    /// The host buffer of a CPU tensor, made unique first (copy-on-write).
    pub(crate) fn cpu_storage_mut(&mut self, op: &'static str) -> Result<&mut CpuStorage> {
        let device = self.device();
        match self.storage_mut()? {
            Storage::Cpu(s) => Ok(s),
            #[allow(unreachable_patterns)]
            _ => Err(TensorError::WrongDevice {
                op,
                expected: Device::Cpu,
                got: device,
            }),
        }
    }

    /// The elements in row-major order, copied to the host. Errors if `T` is not the
    /// tensor's dtype (use [`Tensor::to_dtype`] first to convert).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.check_dtype::<T>("to_vec")?;
        let host = self.moved_to(Device::Cpu)?;
        let values = T::slice(host.cpu_storage()?).expect("dtype checked above");
        if host.is_contiguous() {
            return Ok(values[host.offset..host.offset + host.elem_count()].to_vec());
        }
        let mut out = Vec::with_capacity(host.elem_count());
        crate::layout::gather_strided(values, host.dims(), &host.strides, host.offset, &mut out);
        Ok(out)
    }

    /// The elements' bit patterns in row-major order, copied to the host: floats as
    /// their IEEE bits (`f32::to_bits` widened), integers as their two's-complement
    /// value, bools as 0 / 1. Reproducibility checks compare these, not the values, so
    /// that `-0.0` against `0.0` and one NaN payload against another count as different.
    pub fn to_bits(&self) -> Result<Vec<u64>> {
        fn widen<T: Element>(t: &Tensor, bits: impl Fn(T) -> u64) -> Result<Vec<u64>> {
            Ok(t.to_vec::<T>()?.into_iter().map(bits).collect())
        }
        match self.dtype() {
            DType::F32 => widen(self, |v: f32| u64::from(v.to_bits())),
            DType::F64 => widen(self, f64::to_bits),
            DType::F16 => widen(self, |v: half::f16| u64::from(v.to_bits())),
            DType::BF16 => widen(self, |v: half::bf16| u64::from(v.to_bits())),
            DType::I64 => widen(self, |v: i64| v as u64),
            DType::U32 => widen(self, |v: u32| u64::from(v)),
            DType::U8 => widen(self, |v: u8| u64::from(v)),
            DType::Bool => widen(self, |v: bool| u64::from(v)),
        }
    }

    /// The single element of a one-element tensor (any rank), e.g. a loss. Errors on any
    /// other element count or a dtype other than `T`.
    pub fn to_scalar<T: Element>(&self) -> Result<T> {
        self.check_dtype::<T>("to_scalar")?;
        if self.elem_count() != 1 {
            return Err(TensorError::NotAScalar {
                op: "to_scalar",
                dims: self.dims().to_vec(),
            });
        }
        Ok(self.to_vec::<T>()?[0])
    }

    /// Errors unless the tensor holds `T`.
    pub fn check_dtype<T: Element>(&self, op: &'static str) -> Result<()> {
        if T::DTYPE != self.dtype() {
            return Err(TensorError::DTypeMismatch {
                op,
                expected: self.dtype(),
                got: T::DTYPE,
            });
        }
        Ok(())
    }

    /// Errors unless the tensor is contiguous.
    pub(crate) fn check_contiguous(&self, op: &'static str) -> Result<()> {
        if !self.is_contiguous() {
            return Err(TensorError::NotContiguous {
                op,
                dims: self.dims().to_vec(),
                strides: self.strides.clone(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor, TensorError};

    #[test]
    fn slices_and_scalars() {
        let t = Tensor::from_vec(vec![1f32, 2., 3., 4., 5., 6.], &[2, 3], Device::Cpu).unwrap();
        assert_eq!(t.as_slice::<f32>().unwrap(), &[1., 2., 3., 4., 5., 6.]);
        assert!(matches!(
            t.as_slice::<f64>(),
            Err(TensorError::DTypeMismatch { .. })
        ));
        assert!(matches!(
            t.t().unwrap().as_slice::<f32>(),
            Err(TensorError::NotContiguous { .. })
        ));
        let row = t.narrow(0, 1, 1).unwrap();
        assert_eq!(row.as_slice::<f32>().unwrap(), &[4., 5., 6.]);
        assert!(matches!(
            t.to_scalar::<f32>(),
            Err(TensorError::NotAScalar { .. })
        ));
        let one = Tensor::full(&[1, 1], 2.5, DType::F32, Device::Cpu).unwrap();
        assert_eq!(one.to_scalar::<f32>().unwrap(), 2.5);
        assert_eq!(t.cpu_storage().unwrap().len(), 6);
    }

    #[test]
    fn mutable_slice_copies_shared_storage() {
        let a = Tensor::from_vec(vec![1i64, 2, 3], &[3], Device::Cpu).unwrap();
        let mut b = a.clone();
        b.as_mut_slice::<i64>().unwrap()[0] = 10;
        assert_eq!(a.to_vec::<i64>().unwrap(), vec![1, 2, 3]);
        assert_eq!(b.to_vec::<i64>().unwrap(), vec![10, 2, 3]);
        let mut c = b.narrow(0, 1, 2).unwrap();
        c.as_mut_slice::<i64>().unwrap()[1] = 7;
        assert_eq!(c.to_vec::<i64>().unwrap(), vec![2, 7]);
        assert_eq!(b.to_vec::<i64>().unwrap(), vec![10, 2, 3]);
    }
}
