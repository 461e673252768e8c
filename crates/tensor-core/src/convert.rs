//! Dtype conversion with exactly specified rounding.
//!
//! * float -> float: round to nearest, ties to even, computed as if in infinite
//!   precision (wide values are narrowed with round-to-odd first; see `round.rs`);
//! * int / bool -> float: the same rounding (exact where the value fits);
//! * float -> int: truncate toward zero, saturate at the type's bounds, NaN -> 0
//!   (Rust's `as`);
//! * int -> int: saturate at the target's bounds;
//! * anything -> bool: `value != 0` (NaN -> true);
//! * bool -> number: 0 or 1.

use crate::creation::try_with_capacity;
use crate::round::i64_to_f64_round_to_odd;
use crate::{DType, Device, Element, Result, Tensor};

/// Converts a slice element by element: widen to f64 (exactly, or with round-to-odd for
/// i64 beyond 2^53), then narrow to `D` with `Element::from_f64`.
fn cast_slice<S: Element, D: Element>(src: &[S], widen: fn(S) -> f64) -> Result<Vec<D>> {
    let mut out = try_with_capacity(src.len(), D::DTYPE)?;
    out.extend(src.iter().map(|&v| D::from_f64(widen(v))));
    Ok(out)
}

impl Tensor {
    /// A copy converted to `dtype` (a shared clone when it already has it), with the
    /// rounding rules in this module's docs. A CUDA tensor is converted on the host
    /// (downloaded, converted, uploaded): the same values as on the CPU, at the cost of
    /// two copies; f32 to bf16 (autocast's narrowing) is converted on the device.
    #[track_caller]
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        audited!("to_dtype", [self], {
            if dtype == self.dtype() {
                return Ok(self.clone());
            }
            #[cfg(feature = "cuda")]
            if self.device() != Device::Cpu && self.dtype() == DType::F32 && dtype == DType::BF16 {
                // On the device, by §5.10's rounding (`ditto_gather_f32_to_bf16`).
                return crate::ops::cuda::to_bf16(self);
            }
            if self.device() != Device::Cpu {
                return self
                    .moved_to(Device::Cpu)?
                    .to_dtype(dtype)?
                    .moved_to(self.device());
            }
            let src = self.contiguous()?;
            let storage = if self.dtype() == DType::I64 {
                let values = src.as_slice::<i64>()?;
                // To f64 a single rounding to nearest is right; to anything narrower, round
                // to odd first so the second rounding is still correct.
                let widen: fn(i64) -> f64 = if dtype == DType::F64 {
                    |v| v as f64
                } else {
                    i64_to_f64_round_to_odd
                };
                with_dtype!(dtype, D => D::into_storage(cast_slice(values, widen)?))
            } else {
                with_dtype!(self.dtype(), S => {
                    let values = src.as_slice::<S>()?;
                    with_dtype!(dtype, D => D::into_storage(cast_slice(values, S::to_f64)?))
                })
            };
            Tensor::from_cpu_storage(storage, self.dims())
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{bf16, f16, DType, Device, Tensor};

    fn cpu<T: crate::Element>(v: Vec<T>) -> Tensor {
        let n = v.len();
        Tensor::from_vec(v, &[n], Device::Cpu).unwrap()
    }

    #[test]
    fn float_to_int_truncates_and_saturates() {
        let t = cpu(vec![-2.7f32, 2.7, 1e10, -1e10, f32::NAN, 255.9, -0.5]);
        let i = t.to_dtype(DType::I64).unwrap().to_vec::<i64>().unwrap();
        assert_eq!(i, vec![-2, 2, 10_000_000_000, -10_000_000_000, 0, 255, 0]);
        let u = t.to_dtype(DType::U8).unwrap().to_vec::<u8>().unwrap();
        assert_eq!(u, vec![0, 2, 255, 0, 0, 255, 0]);
        let b = t.to_dtype(DType::Bool).unwrap().to_vec::<bool>().unwrap();
        assert_eq!(b, vec![true, true, true, true, true, true, true]);
        let z = cpu(vec![0.0f32, -0.0]).to_dtype(DType::Bool).unwrap();
        assert_eq!(z.to_vec::<bool>().unwrap(), vec![false, false]);
    }

    #[test]
    fn int_to_int_saturates_and_bool_is_zero_one() {
        let t = cpu(vec![-5i64, 300, i64::MAX, 7]);
        assert_eq!(
            t.to_dtype(DType::U8).unwrap().to_vec::<u8>().unwrap(),
            vec![0, 255, 255, 7]
        );
        assert_eq!(
            t.to_dtype(DType::U32).unwrap().to_vec::<u32>().unwrap(),
            vec![0, 300, u32::MAX, 7]
        );
        let b = cpu(vec![true, false]).to_dtype(DType::F32).unwrap();
        assert_eq!(b.to_vec::<f32>().unwrap(), vec![1.0, 0.0]);
        let big = cpu(vec![i64::MAX - 1]).to_dtype(DType::F64).unwrap();
        assert_eq!(big.to_vec::<f64>().unwrap(), vec![i64::MAX as f64]);
    }

    #[test]
    fn float_narrowing_rounds_once() {
        // Above the f16 tie between 1 and 1 + 2^-10 only by 2^-40: must round up.
        let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        let h = cpu(vec![x, 1.0 + 2f64.powi(-11)])
            .to_dtype(DType::F16)
            .unwrap();
        let want = vec![f16::from_f32(1.0 + 2f32.powi(-10)), f16::ONE];
        assert_eq!(h.to_vec::<f16>().unwrap(), want);
        // i64 just above a bf16 tie: 2^60 + 2^52 is the tie between 2^60 and 2^60 + 2^53.
        let i = cpu(vec![(1i64 << 60) + (1 << 52) + 1])
            .to_dtype(DType::BF16)
            .unwrap();
        let up = bf16::from_f64((1u64 << 60) as f64 + (1u64 << 53) as f64);
        assert_eq!(i.to_vec::<bf16>().unwrap(), vec![up]);
        let r = cpu(vec![f16::from_f32(0.1)]).to_dtype(DType::F32).unwrap();
        assert_eq!(
            r.to_vec::<f32>().unwrap(),
            vec![f16::from_f32(0.1).to_f32()]
        );
        let strided = Tensor::from_vec(vec![1f32, 2., 3., 4.], &[2, 2], Device::Cpu)
            .unwrap()
            .t()
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap();
        assert_eq!(strided.to_vec::<f64>().unwrap(), vec![1., 3., 2., 4.]);
    }
}
