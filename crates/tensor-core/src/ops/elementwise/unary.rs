//! Elementwise maps of one tensor: activations, `exp` / `log` / `sqrt` / `powf`, and
//! arithmetic with a scalar.
//!
//! Each output element is a function of its input element alone, so the parallel split
//! cannot change any value. Scalars are rounded to the tensor's dtype first.

use crate::ops::{build, par_map, Float, PAR_MIN_LEN};
use crate::{Element, Result, Tensor};

/// A map of one tensor as the GPU kernel sees it: an op code (`DITTO_RELU` ..
/// `DITTO_PORTABLE_LOG` in `cuda/tensor_ops.cuh`, which the CUDA path and the host
/// parity shim pass) and two scalars. The scalars ride in the variant, so an op cannot
/// be launched without the ones it needs, or with stray ones.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    /// `max(x, 0)`.
    Relu,
    /// `e^x`, the platform's (libdevice on a GPU).
    Exp,
    /// The natural logarithm, the platform's.
    Log,
    /// The square root (correctly rounded everywhere).
    Sqrt,
    /// `x^exponent`.
    Pow(f64),
    /// `-x`.
    Neg,
    /// `x * mul + add`, never fused.
    Affine {
        /// The factor.
        mul: f64,
        /// The term added after the product is rounded.
        add: f64,
    },
    /// `x * s`.
    MulScalar(f64),
    /// `x + s`.
    AddScalar(f64),
    /// `exp` under portable arithmetic (docs/contract.md §14): ditto's own, the same
    /// bits on every device.
    PortableExp,
    /// `log` under portable arithmetic (docs/contract.md §14).
    PortableLog,
    /// f32 rounded to the nearest bf16 (ties to even), kept in f32: how autocast
    /// narrows matmul operands (`autocast.rs`). f32 only.
    RoundToBf16,
}

impl UnaryOp {
    /// The kernel's `(op code, a, b)`: the header's number and the scalars (0 where the
    /// op has none), still in f64; the launch rounds them to the dtype.
    pub fn kernel_args(self) -> (i32, f64, f64) {
        match self {
            UnaryOp::Relu => (0, 0.0, 0.0),
            UnaryOp::Exp => (1, 0.0, 0.0),
            UnaryOp::Log => (2, 0.0, 0.0),
            UnaryOp::Sqrt => (3, 0.0, 0.0),
            UnaryOp::Pow(exponent) => (4, exponent, 0.0),
            UnaryOp::Neg => (5, 0.0, 0.0),
            UnaryOp::Affine { mul, add } => (6, mul, add),
            UnaryOp::MulScalar(s) => (7, s, 0.0),
            UnaryOp::AddScalar(s) => (8, s, 0.0),
            UnaryOp::PortableExp => (9, 0.0, 0.0),
            UnaryOp::PortableLog => (10, 0.0, 0.0),
            UnaryOp::RoundToBf16 => (11, 0.0, 0.0),
        }
    }
}

/// `f` applied to every element of a CPU float tensor, as a new contiguous tensor. A
/// contiguous input is read in place; a strided one is gathered first.
fn map<T: Float>(t: &Tensor, f: impl Fn(T) -> T + Sync) -> Result<Tensor> {
    let values = t.values::<T>()?;
    Tensor::from_cpu_storage(T::into_storage(par_map(&values, f)?), t.dims())
}

/// Runs the op on a GPU tensor as the `ditto_unary_*` kernel for `$kernel_op` (a
/// [`UnaryOp`]); on the CPU checks the device, binds `$t` to the float type and maps
/// `$f` (a closure over `$t`).
macro_rules! unary {
    ($tensor:expr, $op:expr, $kernel_op:expr, $t:ident => $f:expr) => {{
        on_cuda!($tensor => crate::ops::cuda::unary($op, $kernel_op, $tensor));
        $tensor.require_cpu($op)?;
        with_float_dtype!($tensor.dtype(), $op, $t => map::<$t>($tensor, $f))
    }};
}

/// [`Tensor::round_to_bf16`] (`autocast.rs`) once the dtype is known to be f32: half's
/// rounding on the CPU, `ditto_round_bf16` (the same rule) on CUDA.
pub(crate) fn round_to_bf16(t: &Tensor) -> Result<Tensor> {
    on_cuda!(t => crate::ops::cuda::unary("round_to_bf16", UnaryOp::RoundToBf16, t));
    t.require_cpu("round_to_bf16")?;
    map::<f32>(t, |x| half::bf16::from_f32(x).to_f32())
}

impl Tensor {
    /// `max(x, 0)`; NaN stays NaN (like PyTorch).
    #[track_caller]
    pub fn relu(&self) -> Result<Tensor> {
        audited!("relu", [self], {
            unary!(self, "relu", UnaryOp::Relu, T => |x: T| if x > T::ZERO || x.is_nan() { x } else { T::ZERO })
        })
    }

    /// The gradient of [`Tensor::relu`]: `grad` where `input > 0`, else 0. Both must
    /// have the same dims and dtype.
    #[track_caller]
    pub fn relu_backward(grad: &Tensor, input: &Tensor) -> Result<Tensor> {
        audited!("relu_backward", [grad, input], {
            const OP: &str = "relu_backward";
            grad.require_compatible(OP, input)?;
            grad.require_same_dims(OP, input)?;
            on_cuda!(grad => crate::ops::cuda::relu_backward(grad, input));
            grad.require_cpu(OP)?;
            with_float_dtype!(grad.dtype(), OP, T => {
                let (g, x) = (grad.values::<T>()?, input.values::<T>()?);
                let out = build(g.len(), 1, PAR_MIN_LEN, |start, dst| {
                    for ((d, &g), &x) in dst.iter_mut().zip(&g[start..]).zip(&x[start..]) {
                        d.write(if x > T::ZERO { g } else { T::ZERO });
                    }
                })?;
                Tensor::from_cpu_storage(T::into_storage(out), grad.dims())
            })
        })
    }

    /// `e^x`: platform libm on the CPU, libdevice on CUDA (identical run to run on one
    /// machine and toolchain); under portable arithmetic, ditto's own for f32, the same
    /// bits on every device (docs/contract.md §14).
    #[track_caller]
    pub fn exp(&self) -> Result<Tensor> {
        audited!("exp", [self], {
            if crate::are_portable_arithmetic_enabled() {
                unary!(self, "exp", UnaryOp::PortableExp, T => |x: T| x.portable_exp())
            } else {
                unary!(self, "exp", UnaryOp::Exp, T => |x: T| x.exp())
            }
        })
    }

    /// Natural logarithm, as [`Tensor::exp`] for where it comes from; `log(0) = -inf`,
    /// negative inputs give NaN.
    #[track_caller]
    pub fn log(&self) -> Result<Tensor> {
        audited!("log", [self], {
            if crate::are_portable_arithmetic_enabled() {
                unary!(self, "log", UnaryOp::PortableLog, T => |x: T| x.portable_ln())
            } else {
                unary!(self, "log", UnaryOp::Log, T => |x: T| x.ln())
            }
        })
    }

    /// Square root (correctly rounded IEEE-754).
    #[track_caller]
    pub fn sqrt(&self) -> Result<Tensor> {
        audited!("sqrt", [self], {
            unary!(self, "sqrt", UnaryOp::Sqrt, T => |x: T| x.sqrt())
        })
    }

    /// `x^exponent` (platform libm), the exponent rounded to the dtype.
    #[track_caller]
    pub fn powf(&self, exponent: f64) -> Result<Tensor> {
        audited!("powf", [self], {
            unary!(self, "powf", UnaryOp::Pow(exponent), T => {
                let e = T::from_f64(exponent);
                move |x: T| x.powf(e)
            })
        })
    }

    /// `-x` (flips the sign bit, so `-0.0` and NaN signs flip too).
    #[track_caller]
    pub fn neg(&self) -> Result<Tensor> {
        audited!("neg", [self], {
            unary!(self, "neg", UnaryOp::Neg, T => |x: T| -x)
        })
    }

    /// `x * mul + add`: a multiply then an add, each rounded (never fused), with `mul`
    /// and `add` rounded to the dtype first.
    #[track_caller]
    pub fn affine(&self, mul: f64, add: f64) -> Result<Tensor> {
        audited!("affine", [self], {
            unary!(self, "affine", UnaryOp::Affine { mul, add }, T => {
                let (m, a) = (T::from_f64(mul), T::from_f64(add));
                move |x: T| x * m + a
            })
        })
    }

    /// `x * s` (unlike `affine(s, 0.0)`, keeps `-0.0`).
    #[track_caller]
    pub fn mul_scalar(&self, s: f64) -> Result<Tensor> {
        audited!("mul_scalar", [self], {
            unary!(self, "mul_scalar", UnaryOp::MulScalar(s), T => {
                let s = T::from_f64(s);
                move |x: T| x * s
            })
        })
    }

    /// `x + s`.
    #[track_caller]
    pub fn add_scalar(&self, s: f64) -> Result<Tensor> {
        audited!("add_scalar", [self], {
            unary!(self, "add_scalar", UnaryOp::AddScalar(s), T => {
                let s = T::from_f64(s);
                move |x: T| x + s
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor, TensorError};

    fn f32s(v: Vec<f32>) -> Tensor {
        let n = v.len();
        Tensor::from_vec(v, &[n], Device::Cpu).unwrap()
    }

    fn bits(t: &Tensor) -> Vec<u64> {
        t.to_bits().unwrap()
    }

    #[test]
    fn activations() {
        let x = f32s(vec![-1.0, 0.0, 2.5, f32::NAN]);
        let r = x.relu().unwrap().to_vec::<f32>().unwrap();
        assert_eq!(&r[..3], &[0.0, 0.0, 2.5]);
        assert!(r[3].is_nan());
        let g = f32s(vec![1.0, 2.0, 3.0, 4.0]);
        let b = Tensor::relu_backward(&g, &x).unwrap();
        assert_eq!(b.to_vec::<f32>().unwrap(), vec![0.0, 0.0, 3.0, 0.0]);
        let short = f32s(vec![1.0]);
        assert!(matches!(
            Tensor::relu_backward(&short, &x),
            Err(TensorError::ShapeMismatch { .. })
        ));
    }

    #[test]
    fn math_matches_std() {
        let x = f32s(vec![0.5, 1.0, 4.0]);
        let want = |f: fn(f32) -> f32| vec![f(0.5), f(1.0), f(4.0)];
        assert_eq!(x.exp().unwrap().to_vec::<f32>().unwrap(), want(f32::exp));
        assert_eq!(x.log().unwrap().to_vec::<f32>().unwrap(), want(f32::ln));
        assert_eq!(x.sqrt().unwrap().to_vec::<f32>().unwrap(), want(f32::sqrt));
        assert_eq!(
            x.powf(1.5).unwrap().to_vec::<f32>().unwrap(),
            want(|v| v.powf(1.5))
        );
        let d = Tensor::from_vec(vec![0.1f64], &[1], Device::Cpu).unwrap();
        assert_eq!(
            d.exp().unwrap().to_vec::<f64>().unwrap(),
            vec![0.1f64.exp()]
        );
    }

    #[test]
    fn scalar_arithmetic_is_unfused_and_rounds_the_scalar() {
        let x = f32s(vec![-0.0, 3.0, 1.0 / 3.0]);
        assert_eq!(
            bits(&x.mul_scalar(2.0).unwrap())[0],
            u64::from((-0.0f32).to_bits())
        );
        assert_eq!(
            bits(&x.affine(2.0, 0.0).unwrap())[0],
            u64::from(0.0f32.to_bits())
        );
        let third = 1.0f32 / 3.0;
        let want = third * 0.1f32 + 0.7f32;
        assert_eq!(
            x.affine(0.1, 0.7).unwrap().to_vec::<f32>().unwrap()[2],
            want
        );
        assert_eq!(x.add_scalar(1.0).unwrap().to_vec::<f32>().unwrap()[1], 4.0);
        assert_eq!(bits(&x.neg().unwrap())[0], u64::from(0.0f32.to_bits()));
        let i = Tensor::zeros(&[1], DType::U8, Device::Cpu).unwrap();
        assert!(matches!(i.exp(), Err(TensorError::UnsupportedDType { .. })));
    }
}
