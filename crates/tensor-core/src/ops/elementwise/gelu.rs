//! GELU with the tanh approximation (GPT-2's activation, PyTorch's
//! `gelu(x, approximate="tanh")`) and its gradient.
//!
//! Each output element is a function of its own input element (and gradient), so the
//! parallel split cannot change a value. The arithmetic is PyTorch's CPU kernel's,
//! operation for operation, in the tensor's dtype. `tanh` is, for f32, [`tanh_f32`]
//! below, or ditto's own ([`crate::portable::math::tanh`]) under portable arithmetic,
//! the same bits on every device (docs/contract.md §14); for f64, libm's.
//!
//! Why not libm's `tanhf` in default mode? It is a scalar call that branches on its
//! input, so the loop cannot be vectorised: it was a third of a GPT step on the CPU
//! (`tanhf` and the `expm1f` it calls). PyTorch's CPU kernel uses a vectorised `tanh`
//! (Sleef) for the same reason. [`tanh_f32`] is branch-free add, mul, div and bit
//! operations, which the compiler vectorises; Rust never fuses a multiply-add on its
//! own, so every SIMD width gives the same bits.

use crate::ops::{build, Float, PAR_MIN_LEN};
use std::mem::MaybeUninit;

use crate::{Element, Result, Tensor};

/// `sqrt(2 / pi)`, as PyTorch spells it (`M_SQRT2 * M_2_SQRTPI * 0.5`, in f64).
pub(crate) const GELU_BETA: f64 = std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5;
/// The cubic term's coefficient.
pub(crate) const GELU_KAPPA: f64 = 0.044715;

/// `tanh`: [`tanh_f32`] (libm's for f64), or ditto's own under portable arithmetic.
/// Inlined, like the element functions below, so that a loop over a constant
/// `portable = false` is straight-line arithmetic the compiler vectorises.
#[inline(always)]
fn tanh_of<T: Float>(x: T, portable: bool) -> T {
    if portable {
        x.portable_tanh()
    } else {
        x.tanh()
    }
}

/// `tanh(x)` for f32 within 2^-23 of the exact value, absolutely (not relatively: near
/// 0 the result has fewer correct bits than `x`, which GELU never sees, because it only
/// uses `1 + tanh` and `1 - tanh^2`, whose errors are absolute too).
///
/// `tanh |x| = 1 - 2 / (e^(2|x|) + 1)`, with the sign put back. `e^y` for `y` in
/// `[0, 20]` (from 10 on, `tanh` rounds to 1 in f32) reduces `y = n ln 2 + r`, `|r| <=
/// ln(2) / 2`, rounds `n` with the add-and-subtract trick (`1.5 * 2^23` forces the
/// rounding), sums e^r's Taylor series to the r^7 term (relative error below 2^-24 on
/// that interval) and scales by `2^n` through the exponent bits.
#[must_use]
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23
    const LN2_HI: f32 = 0.693_145_75; // ln 2's high 17 bits: n * LN2_HI is exact
    const LN2_LO: f32 = 1.428_606_8e-6;
    let y = 2.0 * x.abs().min(10.0);
    let n = (y * std::f32::consts::LOG2_E + ROUND) - ROUND;
    let r = (y - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (1.0 / 2.0
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let e = p * f32::from_bits(((n as i32 + 127) as u32) << 23);
    let t = (1.0 - 2.0 / (e + 1.0)).copysign(x);
    // `min` dropped a NaN; give it back (a select, which vectorises like the rest).
    if x.is_nan() {
        x
    } else {
        t
    }
}

/// One element of the forward pass: `0.5 x (1 + tanh(beta (x + kappa x^3)))`.
#[inline(always)]
fn forward<T: Float>(x: T, portable: bool) -> T {
    let (beta, kappa) = (T::from_f64(GELU_BETA), T::from_f64(GELU_KAPPA));
    let (half, one) = (T::from_f64(0.5), T::from_f64(1.0));
    let cube = x * x * x;
    let inner = beta * (x + kappa * cube);
    half * x * (one + tanh_of(inner, portable))
}

/// One element of the backward pass: `grad * d gelu / dx`, as PyTorch's
/// `GeluBackwardKernel` writes it for the tanh approximation.
#[inline(always)]
fn backward<T: Float>(grad: T, x: T, portable: bool) -> T {
    let (beta, kappa) = (T::from_f64(GELU_BETA), T::from_f64(GELU_KAPPA));
    let (half, one, three) = (T::from_f64(0.5), T::from_f64(1.0), T::from_f64(3.0));
    let square = x * x;
    let cube = square * x;
    let inner = beta * (x + kappa * cube);
    let tanh_inner = tanh_of(inner, portable);
    let left = half * x;
    let right = one + tanh_inner;
    let left_derivative = half * right;
    let tanh_derivative = one - tanh_inner * tanh_inner;
    let inner_derivative = beta * (one + three * kappa * square);
    let right_derivative = left * tanh_derivative * inner_derivative;
    grad * (left_derivative + right_derivative)
}

/// `x`'s last dimension, checking that `bias` (if any) is `[that dimension]` of `x`'s
/// dtype and device: the length of the rows the bias repeats over (1 without a bias).
fn bias_width(op: &'static str, x: &Tensor, bias: Option<&Tensor>) -> Result<usize> {
    let Some(bias) = bias else {
        return Ok(1);
    };
    x.require_compatible(op, bias)?;
    let c = x.dims().last().copied().unwrap_or(0);
    if x.rank() == 0 || bias.dims() != [c] {
        return Err(crate::TensorError::InvalidArgument {
            op,
            message: format!(
                "the bias must be [{c}], the input's last dimension (input {:?}), got {:?}",
                x.dims(),
                bias.dims()
            ),
        });
    }
    Ok(c.max(1))
}

/// `dst[i] = f(g[i], x[i])`, or `f(g[i], x[i] + bias[i % c])` (rounded as `add` rounds
/// it) with a bias of `c` values; `dst` starts at a row boundary. Row by row, so the
/// loops stay straight-line arithmetic the compiler vectorises. The forward passes `x`
/// as `g` and ignores it (the compiler drops the unused loads).
#[inline(always)]
fn zip_biased<T: Float>(
    dst: &mut [MaybeUninit<T>],
    g: &[T],
    x: &[T],
    bias: Option<&[T]>,
    f: impl Fn(T, T) -> T + Copy,
) {
    match bias {
        None => dst
            .iter_mut()
            .zip(g)
            .zip(x)
            .for_each(|((d, &g), &x)| _ = d.write(f(g, x))),
        Some(b) => {
            let rows = dst
                .chunks_mut(b.len())
                .zip(g.chunks(b.len()))
                .zip(x.chunks(b.len()));
            for ((d, g), x) in rows {
                let each = d.iter_mut().zip(g).zip(x).zip(b);
                each.for_each(|(((d, &g), &x), &b)| _ = d.write(f(g, x + b)));
            }
        }
    }
}

impl Tensor {
    /// GELU with the tanh approximation: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
    /// x^3)))`, elementwise (PyTorch's `gelu(x, approximate="tanh")`, GPT-2's
    /// activation). In the tensor's dtype, each operation rounded in the order written;
    /// `tanh` as described in the module docs.
    #[track_caller]
    pub fn gelu_tanh(&self) -> Result<Tensor> {
        audited!("gelu_tanh", [self], { gelu_tanh_of(self, None) })
    }

    /// `gelu_tanh(self + bias)` with `bias` (`[c]`) added to every row of `self`
    /// (`[..., c]`) in the same pass: the bits of `self.add(bias)?.gelu_tanh()`, one
    /// kernel instead of two and no biased tensor in memory (the epilogue a GPT's MLP
    /// runs after its first product; cuBLASLt calls it `GELU_BIAS`).
    #[track_caller]
    pub fn bias_gelu_tanh(&self, bias: &Tensor) -> Result<Tensor> {
        audited!("bias_gelu_tanh", [self, bias], {
            gelu_tanh_of(self, Some(bias))
        })
    }

    /// The gradient of [`Tensor::gelu_tanh`] at `input`, times `grad` (PyTorch's
    /// `gelu_backward(grad, input, approximate="tanh")`). Both must have the same dims,
    /// dtype and device.
    #[track_caller]
    pub fn gelu_tanh_backward(grad: &Tensor, input: &Tensor) -> Result<Tensor> {
        audited!("gelu_tanh_backward", [grad, input], {
            gelu_tanh_backward_of(grad, input, None)
        })
    }

    /// The gradient of [`Tensor::bias_gelu_tanh`] at `input` and `bias`, times `grad`
    /// (with respect to `input + bias`, so also the bias's gradient before its sum over
    /// rows): the bits of `gelu_tanh_backward(grad, &input.add(bias)?)`.
    #[track_caller]
    pub fn bias_gelu_tanh_backward(grad: &Tensor, input: &Tensor, bias: &Tensor) -> Result<Tensor> {
        audited!("bias_gelu_tanh_backward", [grad, input, bias], {
            gelu_tanh_backward_of(grad, input, Some(bias))
        })
    }
}

fn gelu_tanh_of(x: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    const OP: &str = "gelu_tanh";
    let c = bias_width(OP, x, bias)?;
    let portable = crate::are_portable_arithmetic_enabled();
    on_cuda!(x => crate::ops::cuda::gelu_tanh(x, bias, None, portable));
    x.require_cpu(OP)?;
    with_float_dtype!(x.dtype(), OP, T => {
        let values = x.values::<T>()?;
        if values.is_empty() {
            // Nothing to compute, and no rows for an empty bias to repeat over.
            return Tensor::from_cpu_storage(T::into_storage(Vec::new()), x.dims());
        }
        let b = bias.map(|b| b.values::<T>()).transpose()?;
        let b = b.as_deref();
        let out = build(values.len(), c, PAR_MIN_LEN.max(c), |start, dst| {
            let x = &values[start..start + dst.len()];
            // One loop per setting, each with a constant `portable` (see `tanh_of`).
            if portable {
                zip_biased(dst, x, x, b, |_, x| forward(x, true));
            } else {
                crate::ops::widest_simd(|| zip_biased(dst, x, x, b, |_, x| forward(x, false)));
            }
        })?;
        Tensor::from_cpu_storage(T::into_storage(out), x.dims())
    })
}

fn gelu_tanh_backward_of(grad: &Tensor, input: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    const OP: &str = "gelu_tanh_backward";
    grad.require_compatible(OP, input)?;
    grad.require_same_dims(OP, input)?;
    let c = bias_width(OP, input, bias)?;
    let portable = crate::are_portable_arithmetic_enabled();
    on_cuda!(input => crate::ops::cuda::gelu_tanh(input, bias, Some(grad), portable));
    grad.require_cpu(OP)?;
    with_float_dtype!(grad.dtype(), OP, T => {
        let (g, x) = (grad.values::<T>()?, input.values::<T>()?);
        if g.is_empty() {
            // As in the forward: nothing to compute.
            return Tensor::from_cpu_storage(T::into_storage(Vec::new()), grad.dims());
        }
        let b = bias.map(|b| b.values::<T>()).transpose()?;
        let b = b.as_deref();
        let out = build(g.len(), c, PAR_MIN_LEN.max(c), |start, dst| {
            let span = start..start + dst.len();
            let (g, x) = (&g[span.clone()], &x[span]);
            if portable {
                zip_biased(dst, g, x, b, |g, x| backward(g, x, true));
            } else {
                crate::ops::widest_simd(|| zip_biased(dst, g, x, b, |g, x| backward(g, x, false)));
            }
        })?;
        Tensor::from_cpu_storage(T::into_storage(out), grad.dims())
    })
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor, TensorError};

    fn reference(x: f64) -> f64 {
        0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
    }

    #[test]
    fn matches_the_formula_and_its_derivative() {
        let xs: Vec<f64> = (0..401).map(|i| f64::from(i) / 40.0 - 5.0).collect();
        let x = Tensor::from_vec(xs.clone(), &[401], Device::Cpu).unwrap();
        let y = x.gelu_tanh().unwrap().to_vec::<f64>().unwrap();
        for (&x, &y) in xs.iter().zip(&y) {
            assert!((y - reference(x)).abs() < 1e-12, "gelu({x}) = {y}");
        }
        let ones = Tensor::ones(&[401], DType::F64, Device::Cpu).unwrap();
        let dy = Tensor::gelu_tanh_backward(&ones, &x)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        for (&x, &d) in xs.iter().zip(&dy) {
            let h = 1e-6;
            let numeric = (reference(x + h) - reference(x - h)) / (2.0 * h);
            assert!(
                (d - numeric).abs() < 1e-8,
                "gelu'({x}) = {d}, numeric {numeric}"
            );
        }
    }

    /// The bias in GELU's pass gives the bits of adding it first, forward and backward,
    /// in both dtypes, over rows that split across threads; a bias that is not `[last
    /// dim]` is a typed error. (Portable arithmetic is a process-wide switch, so its
    /// fused path is checked in `gpu_transformer_ops.rs`, a process of its own.)
    #[test]
    fn bias_gelu_is_the_bits_of_add_then_gelu() {
        let (rows, c) = (700, 37);
        let values = |salt: f32| -> Vec<f32> {
            (0..rows * c)
                .map(|i| (i as f32 * 0.618 + salt).sin() * 4.0)
                .collect()
        };
        for dtype in [DType::F32, DType::F64] {
            let t = |v: Vec<f32>, dims: &[usize]| {
                Tensor::from_vec(v, dims, Device::Cpu)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap()
            };
            let x = t(values(0.0), &[rows, c]);
            let g = t(values(1.0), &[rows, c]);
            let b = t(values(2.0)[..c].to_vec(), &[c]);
            let added = x.add(&b).unwrap();
            let pairs = [
                (x.bias_gelu_tanh(&b).unwrap(), added.gelu_tanh().unwrap()),
                (
                    Tensor::bias_gelu_tanh_backward(&g, &x, &b).unwrap(),
                    Tensor::gelu_tanh_backward(&g, &added).unwrap(),
                ),
            ];
            for (fused, apart) in pairs {
                let bits = |t: &Tensor| t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
                let same = bits(&fused)
                    .iter()
                    .zip(&bits(&apart))
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{dtype:?}");
            }
            let wrong = t(vec![0.0; c + 1], &[c + 1]);
            assert!(matches!(
                x.bias_gelu_tanh(&wrong),
                Err(TensorError::InvalidArgument { .. })
            ));
        }
    }

    /// Empty rows (a last dimension of 0, so an empty bias) give empty results.
    #[test]
    fn empty_rows_give_empty_results() {
        let x = Tensor::zeros(&[2, 0], DType::F32, Device::Cpu).unwrap();
        let b = Tensor::zeros(&[0], DType::F32, Device::Cpu).unwrap();
        assert_eq!(x.bias_gelu_tanh(&b).unwrap().dims(), &[2, 0]);
        let dx = Tensor::bias_gelu_tanh_backward(&x, &x, &b).unwrap();
        assert_eq!(dx.dims(), &[2, 0]);
        assert_eq!(x.gelu_tanh().unwrap().dims(), &[2, 0]);
    }

    #[test]
    fn tanh_f32_is_within_2_pow_minus_23_of_tanh() {
        let mut worst = 0.0f64;
        for i in -2_000_000..=2_000_000 {
            let x = i as f32 * 1e-5; // [-20, 20]
            let t = super::tanh_f32(x);
            worst = worst.max((f64::from(t) - f64::from(x).tanh()).abs());
            assert_eq!(
                t.to_bits() >> 31,
                x.to_bits() >> 31,
                "the sign of tanh({x})"
            );
        }
        assert!(worst < 2f64.powi(-23), "worst absolute error {worst:e}");
        assert_eq!(super::tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(super::tanh_f32(f32::NEG_INFINITY), -1.0);
        assert!(super::tanh_f32(f32::NAN).is_nan());
    }

    /// The vectorised loops (every SIMD width) give the bits of one element at a time.
    #[test]
    fn vectorised_loops_round_as_the_scalar_code() {
        let xs: Vec<f32> = (0..100_000)
            .map(|i| (i as f32 - 50_000.0) * 3.1e-4)
            .collect();
        let x = Tensor::from_vec(xs.clone(), &[xs.len()], Device::Cpu).unwrap();
        let y = x.gelu_tanh().unwrap().to_vec::<f32>().unwrap();
        let dy = Tensor::gelu_tanh_backward(&x, &x)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        for (i, &v) in xs.iter().enumerate() {
            let v = std::hint::black_box(v);
            assert_eq!(
                y[i].to_bits(),
                super::forward(v, false).to_bits(),
                "gelu({v})"
            );
            assert_eq!(
                dy[i].to_bits(),
                super::backward(v, v, false).to_bits(),
                "gelu'({v})"
            );
        }
    }

    #[test]
    fn f32_follows_the_f64_values_and_checks_its_operands() {
        let xs: Vec<f32> = (0..64).map(|i| i as f32 / 8.0 - 4.0).collect();
        let x = Tensor::from_vec(xs.clone(), &[8, 8], Device::Cpu).unwrap();
        let y = x.gelu_tanh().unwrap().to_vec::<f32>().unwrap();
        for (&x, &y) in xs.iter().zip(&y) {
            assert!((f64::from(y) - reference(f64::from(x))).abs() < 1e-6);
        }
        let wrong = Tensor::zeros(&[64], DType::F32, Device::Cpu).unwrap();
        assert!(matches!(
            Tensor::gelu_tanh_backward(&wrong, &x),
            Err(TensorError::ShapeMismatch { .. })
        ));
        let ints = Tensor::zeros(&[2], DType::I64, Device::Cpu).unwrap();
        assert!(matches!(
            ints.gelu_tanh(),
            Err(TensorError::UnsupportedDType { .. })
        ));
    }
}
