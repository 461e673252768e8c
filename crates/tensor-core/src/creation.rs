//! Constructors that fill a new tensor: `zeros`, `ones`, `full`, `arange`.
//!
//! Values are built on the host and uploaded, except `zeros` on CUDA, which is allocated
//! zeroed on the device.

use crate::{DType, Device, Element, Result, Shape, Tensor, TensorError};

/// A vector of `len` copies of `value`, with allocation failure reported as an error
/// (`vec![v; n]` would abort the process on an absurd `n`).
pub(crate) fn try_filled<T: Clone>(len: usize, value: T, dtype: DType) -> Result<Vec<T>> {
    let mut values = try_with_capacity(len, dtype)?;
    values.resize(len, value);
    Ok(values)
}

/// An empty vector with room for `len` elements, or an `AllocationFailed` error.
pub(crate) fn try_with_capacity<T>(len: usize, dtype: DType) -> Result<Vec<T>> {
    let mut values = Vec::new();
    values
        .try_reserve_exact(len)
        .map_err(|_| TensorError::AllocationFailed {
            device: Device::Cpu,
            dtype,
            elements: len,
        })?;
    Ok(values)
}

/// A vector of `len` zero elements whose memory comes straight from the allocator's
/// zeroed allocation (`calloc`): large buffers are fresh pages the kernel zeroes on first
/// touch, so nothing writes the zeros up front and whoever fills the buffer first (in
/// parallel, if it likes) touches each page once. Allocation failure is an
/// `AllocationFailed` error instead of an abort. Buffers of `HUGE_PAGE_MIN_BYTES` or
/// more ask Linux for transparent huge pages, as NumPy does for its arrays: filling a
/// fresh 64 MB buffer otherwise takes 16,384 page faults of 4 KiB (measured: rng-gen's
/// allocating `rand` ran at a quarter of its in-place speed), with them 32.
pub fn try_zeroed_vec<T: Element>(len: usize) -> Result<Vec<T>> {
    let failed = || TensorError::AllocationFailed {
        device: Device::Cpu,
        dtype: T::DTYPE,
        elements: len,
    };
    let layout = std::alloc::Layout::array::<T>(len).map_err(|_| failed())?;
    if layout.size() == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the layout has a non-zero size. Every `Element` type (a sealed set: f32,
    // f64, f16, bf16, i64, u32, u8, bool) is valid with all bits zero (0, +0.0, false),
    // so the `len` elements are initialised; the pointer comes from the global allocator
    // with `T`'s layout for exactly `len` elements, as `Vec::from_raw_parts` requires.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout).cast::<T>();
        if ptr.is_null() {
            return Err(failed());
        }
        advise_huge_pages(ptr.cast(), layout.size());
        Ok(Vec::from_raw_parts(ptr, len, len))
    }
}

/// Fresh buffers at least this large get huge-page advice (NumPy's threshold).
pub const HUGE_PAGE_MIN_BYTES: usize = 4 << 20;

/// Asks the kernel to back the whole 4 KiB pages of `bytes` bytes at `ptr` with
/// transparent huge pages (`madvise(MADV_HUGEPAGE)`), when `bytes` is at least
/// [`HUGE_PAGE_MIN_BYTES`]. Only advice: contents never change, and a kernel that
/// refuses (or THP set to `never`) leaves ordinary pages. A no-op off Linux.
fn advise_huge_pages(ptr: *mut u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    if bytes >= HUGE_PAGE_MIN_BYTES {
        const PAGE: usize = 4096;
        let start = (ptr as usize).next_multiple_of(PAGE);
        let end = (ptr as usize + bytes) / PAGE * PAGE;
        if end > start {
            // SAFETY: [start, end) lies inside the allocation just made, page aligned;
            // MADV_HUGEPAGE changes no contents and cannot unmap anything. The result is
            // ignored: the advice is optional.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, bytes);
}

/// Checks that `value` converts to an integer dtype without wrapping: finite and inside
/// the type's range after truncation toward zero. Floats and bool accept anything.
fn check_representable(op: &'static str, value: f64, dtype: DType) -> Result<()> {
    let fits = match dtype {
        DType::I64 => (-(2f64.powi(63))..2f64.powi(63)).contains(&value),
        DType::U32 => value > -1.0 && value < 2f64.powi(32),
        DType::U8 => value > -1.0 && value < 256.0,
        _ => true,
    };
    if fits {
        Ok(())
    } else {
        Err(TensorError::InvalidArgument {
            op,
            message: format!("value {value} does not fit in dtype {dtype}"),
        })
    }
}

impl Tensor {
    /// A tensor of zeros. On CUDA the buffer is allocated and zeroed on the device.
    pub fn zeros(dims: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        if let Device::Cuda(ordinal) = device {
            return crate::transfer::zeros_on(dims, dtype, ordinal);
        }
        Tensor::full(dims, 0.0, dtype, device)
    }

    /// A tensor of ones (`true` for bool).
    pub fn ones(dims: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        Tensor::full(dims, 1.0, dtype, device)
    }

    /// A tensor with every element `value` converted to `dtype` (rounded to nearest even
    /// for floats, truncated toward zero for integers, `!= 0` for bool). Errors when the
    /// value does not fit an integer dtype, instead of wrapping or saturating silently.
    pub fn full(dims: &[usize], value: f64, dtype: DType, device: Device) -> Result<Tensor> {
        check_representable("full", value, dtype)?;
        let shape = Shape::new(dims)?;
        let storage = with_dtype!(dtype, T => {
            T::into_storage(try_filled(shape.elem_count(), T::from_f64(value), dtype)?)
        });
        Tensor::from_cpu_storage(storage, dims)?.moved_to(device)
    }

    /// A tensor of zeros with this tensor's dims, dtype and device.
    pub fn zeros_like(&self) -> Result<Tensor> {
        Tensor::zeros(self.dims(), self.dtype(), self.device())
    }

    /// A tensor of ones with this tensor's dims, dtype and device.
    pub fn ones_like(&self) -> Result<Tensor> {
        Tensor::ones(self.dims(), self.dtype(), self.device())
    }

    /// The 1-D tensor `start, start + step, ...` up to but excluding `end`, like
    /// `torch.arange`. Element `i` is `start + i * step` computed in f64, then converted
    /// to `dtype`; the length is `ceil((end - start) / step)`. Errors when an argument is
    /// not finite, `step` is zero, or `step` points away from `end`.
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType, device: Device) -> Result<Tensor> {
        let bad = |message: String| TensorError::InvalidArgument {
            op: "arange",
            message,
        };
        if !(start.is_finite() && end.is_finite() && step.is_finite()) {
            return Err(bad(format!(
                "start {start}, end {end} and step {step} must all be finite"
            )));
        }
        if step == 0.0 {
            return Err(bad("step must be non-zero".into()));
        }
        if (end - start) * step < 0.0 {
            return Err(bad(format!(
                "step {step} has the wrong sign to go from {start} to {end}"
            )));
        }
        let count = ((end - start) / step).ceil();
        if count >= 2f64.powi(53) {
            return Err(bad(format!(
                "{count} elements is more than arange supports (2^53)"
            )));
        }
        let count = count as usize;
        let last = start + (count.saturating_sub(1)) as f64 * step;
        check_representable("arange", start, dtype)?;
        check_representable("arange", last, dtype)?;
        let storage = with_dtype!(dtype, T => {
            let mut values = try_with_capacity::<T>(count, dtype)?;
            values.extend((0..count).map(|i| T::from_f64(start + i as f64 * step)));
            T::into_storage(values)
        });
        Tensor::from_cpu_storage(storage, &[count])?.moved_to(device)
    }
}

#[cfg(test)]
mod tests {
    use crate::{bf16, DType, Device, Tensor, TensorError};

    #[test]
    fn filled_tensors() {
        let z = Tensor::zeros(&[2, 3], DType::F32, Device::Cpu).unwrap();
        assert_eq!(z.dims(), &[2, 3]);
        assert_eq!(z.to_vec::<f32>().unwrap(), vec![0.0; 6]);
        let o = Tensor::ones(&[2], DType::Bool, Device::Cpu).unwrap();
        assert_eq!(o.to_vec::<bool>().unwrap(), vec![true, true]);
        let f = Tensor::full(&[3], -2.7, DType::I64, Device::Cpu).unwrap();
        assert_eq!(f.to_vec::<i64>().unwrap(), vec![-2, -2, -2]);
        let b = Tensor::full(&[1], 1.0 / 3.0, DType::BF16, Device::Cpu).unwrap();
        assert_eq!(b.to_vec::<bf16>().unwrap(), vec![bf16::from_f32(1.0 / 3.0)]);
        let s = Tensor::full(&[], 4.0, DType::U8, Device::Cpu).unwrap();
        assert_eq!(s.to_scalar::<u8>().unwrap(), 4);
        for (v, dt) in [
            (256.0, DType::U8),
            (-1.0, DType::U32),
            (f64::NAN, DType::I64),
        ] {
            assert!(matches!(
                Tensor::full(&[1], v, dt, Device::Cpu),
                Err(TensorError::InvalidArgument { .. })
            ));
        }
        assert!(Tensor::full(&[1], -0.5, DType::U8, Device::Cpu).is_ok());
    }

    #[test]
    fn absurd_sizes_are_errors() {
        let err = Tensor::zeros(&[usize::MAX / 2, 4], DType::F32, Device::Cpu).unwrap_err();
        assert!(matches!(err, TensorError::ShapeOverflow { .. }));
        let err = Tensor::zeros(&[usize::MAX / 2], DType::F32, Device::Cpu).unwrap_err();
        assert!(matches!(err, TensorError::AllocationFailed { .. }));
    }

    #[test]
    fn arange_matches_torch() {
        let a = Tensor::arange(0.0, 5.0, 1.0, DType::I64, Device::Cpu).unwrap();
        assert_eq!(a.to_vec::<i64>().unwrap(), vec![0, 1, 2, 3, 4]);
        let a = Tensor::arange(1.0, 2.0, 0.25, DType::F32, Device::Cpu).unwrap();
        assert_eq!(a.to_vec::<f32>().unwrap(), vec![1.0, 1.25, 1.5, 1.75]);
        let a = Tensor::arange(3.0, 0.0, -1.5, DType::F64, Device::Cpu).unwrap();
        assert_eq!(a.to_vec::<f64>().unwrap(), vec![3.0, 1.5]);
        let a = Tensor::arange(2.0, 2.0, 1.0, DType::F32, Device::Cpu).unwrap();
        assert_eq!(a.dims(), &[0]);
        for (s, e, st) in [
            (0.0, 1.0, 0.0),
            (0.0, 1.0, -1.0),
            (0.0, f64::INFINITY, 1.0),
            (0.0, 1e300, 1e-300),
        ] {
            assert!(matches!(
                Tensor::arange(s, e, st, DType::F32, Device::Cpu),
                Err(TensorError::InvalidArgument { .. })
            ));
        }
    }
}
