//! Argument checks shared by the random ops, and the checked parameter types of the
//! float ops (`UniformRange`, `MeanStd`). They all run before a generator is touched,
//! so a rejected call consumes no randomness and reports the same error on every
//! device.

use half::{bf16, f16};
use tensor_core::{DType, Device, Shape};

use crate::registry::{check_device, default_generator};
use crate::{Generator, RngError};

/// The dtypes of the floating-point samplers, for error messages.
pub(crate) const FLOAT_DTYPES: &str = "f32, f64, f16, bf16";

/// Element count of `dims`; `ShapeOverflow` if it does not fit in `usize`.
pub(crate) fn elem_count(dims: &[usize]) -> Result<usize, RngError> {
    Ok(Shape::new(dims)?.elem_count())
}

/// Errors unless `dtype` is a float type.
pub(crate) fn check_float(op: &'static str, dtype: DType) -> Result<(), RngError> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(RngError::UnsupportedDType {
            op,
            dtype,
            supported: FLOAT_DTYPES,
        })
    }
}

/// A probability in [0, 1] (NaN refused), returned as the f32 the samplers compare with.
pub(crate) fn probability(op: &'static str, p: f64) -> Result<f32, RngError> {
    if (0.0..=1.0).contains(&p) {
        Ok(p as f32)
    } else {
        Err(RngError::InvalidProbability { op, p })
    }
}

/// Largest finite value of a float dtype, as f64.
fn dtype_max(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => f16::MAX.to_f64(),
        DType::BF16 => bf16::MAX.to_f64(),
        DType::F32 => f64::from(f32::MAX),
        _ => f64::MAX,
    }
}

/// A float op's two parameters, checked for a dtype and device.
pub(crate) trait FloatParams: Copy + Sized {
    /// The parameters `(a, b)` (as the caller gave them, in f64) after checking them and
    /// `dtype` for the op `op` on `device`: the only way to make a `Self`.
    fn checked(
        op: &'static str,
        params: (f64, f64),
        dtype: DType,
        device: Device,
    ) -> Result<Self, RngError>;
}

/// `uniform`'s interval `[low, high)`, checked: finite, non-empty and representable in
/// the precision the sampler computes in (f32 for all but f64), with a finite width.
/// [`FloatParams::checked`] is the only way to make one, so a sampler holding it never
/// sees unchecked bounds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UniformRange {
    low: f64,
    high: f64,
}

impl UniformRange {
    /// `(low, high)`, as the caller gave them (in f64).
    pub(crate) fn bounds(self) -> (f64, f64) {
        (self.low, self.high)
    }
}

impl FloatParams for UniformRange {
    fn checked(
        op: &'static str,
        (low, high): (f64, f64),
        dtype: DType,
        _device: Device,
    ) -> Result<Self, RngError> {
        check_float(op, dtype)?;
        let bad = |reason| RngError::InvalidRange {
            op,
            low,
            high,
            dtype,
            reason,
        };
        if !(low.is_finite() && high.is_finite()) {
            return Err(bad("bounds must be finite"));
        }
        if low >= high {
            return Err(bad("expected low < high"));
        }
        let max = dtype_max(dtype);
        if low.abs() > max || high.abs() > max {
            return Err(bad("bounds must be within the dtype's finite range"));
        }
        let width_finite = if dtype == DType::F64 {
            (high - low).is_finite()
        } else {
            let (low, high) = (low as f32, high as f32);
            if low >= high {
                return Err(bad("low and high round to the same f32"));
            }
            (high - low).is_finite()
        };
        if width_finite {
            Ok(UniformRange { low, high })
        } else {
            Err(bad("high - low overflows"))
        }
    }
}

/// `normal`'s mean and standard deviation, checked in the precision the sampler
/// computes in: a finite mean, a finite `std >= 0`, and a dtype the device can sample
/// (f64 normals are CPU-only). [`FloatParams::checked`] is the only way to make one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MeanStd {
    mean: f64,
    std: f64,
}

impl MeanStd {
    /// `(mean, std)`, as the caller gave them (in f64).
    pub(crate) fn mean_std(self) -> (f64, f64) {
        (self.mean, self.std)
    }
}

impl FloatParams for MeanStd {
    fn checked(
        op: &'static str,
        (mean, std): (f64, f64),
        dtype: DType,
        device: Device,
    ) -> Result<Self, RngError> {
        check_float(op, dtype)?;
        if device.is_cuda() && dtype == DType::F64 {
            return Err(RngError::UnsupportedDType {
                op,
                dtype,
                supported: "f32, f16, bf16 on CUDA (f64 normals are CPU-only)",
            });
        }
        let (mean_ok, std_ok) = if dtype == DType::F64 {
            (mean.is_finite(), std.is_finite())
        } else {
            ((mean as f32).is_finite(), (std as f32).is_finite())
        };
        if !mean_ok {
            return Err(RngError::InvalidMean { op, mean });
        }
        // `std_ok` refuses NaN and infinities, so `< 0.0` is the only case left.
        if !std_ok || std < 0.0 {
            return Err(RngError::InvalidStd { op, std });
        }
        Ok(MeanStd { mean, std })
    }
}

/// The generator an op on `device` draws from: `generator` if given (it must belong to
/// `device`), else the device's default. Errors with `NoSuchDevice` for a CUDA device
/// that does not exist.
pub(crate) fn generator_for(
    op: &'static str,
    device: Device,
    generator: Option<&Generator>,
) -> Result<Generator, RngError> {
    check_device(device)?;
    match generator {
        Some(g) if g.device() != device => Err(RngError::GeneratorDeviceMismatch {
            op,
            generator: g.device(),
            requested: device,
        }),
        Some(g) => Ok(g.clone()),
        None => default_generator(device),
    }
}
