//! GELU with the tanh approximation (GPT-2's activation, PyTorch's
//! `gelu(x, approximate="tanh")`) and its gradient.
//!
//! Each output element is a function of its own input element (and gradient), so the
//! parallel split cannot change a value. The arithmetic is PyTorch's CPU kernel's,
//! operation for operation, in the tensor's dtype; `tanh` is libm's, or ditto's own
//! ([`crate::portable::math::tanh`]) for f32 under portable arithmetic, the same bits
//! on every device (docs/contract.md §14).

use crate::ops::{build, Float, PAR_MIN_LEN};
use crate::{Element, Result, Tensor};

/// `sqrt(2 / pi)`, as PyTorch spells it (`M_SQRT2 * M_2_SQRTPI * 0.5`, in f64).
pub(crate) const GELU_BETA: f64 = std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5;
/// The cubic term's coefficient.
pub(crate) const GELU_KAPPA: f64 = 0.044715;

/// `tanh`: libm's, or ditto's own under portable arithmetic.
fn tanh_of<T: Float>(x: T, portable: bool) -> T {
    if portable {
        x.portable_tanh()
    } else {
        x.tanh()
    }
}

/// One element of the forward pass: `0.5 x (1 + tanh(beta (x + kappa x^3)))`.
fn forward<T: Float>(x: T, portable: bool) -> T {
    let (beta, kappa) = (T::from_f64(GELU_BETA), T::from_f64(GELU_KAPPA));
    let (half, one) = (T::from_f64(0.5), T::from_f64(1.0));
    let cube = x * x * x;
    let inner = beta * (x + kappa * cube);
    half * x * (one + tanh_of(inner, portable))
}

/// One element of the backward pass: `grad * d gelu / dx`, as PyTorch's
/// `GeluBackwardKernel` writes it for the tanh approximation.
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

impl Tensor {
    /// GELU with the tanh approximation: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
    /// x^3)))`, elementwise (PyTorch's `gelu(x, approximate="tanh")`, GPT-2's
    /// activation). In the tensor's dtype, each operation rounded in the order written;
    /// `tanh` as described in the module docs.
    #[track_caller]
    pub fn gelu_tanh(&self) -> Result<Tensor> {
        audited!("gelu_tanh", [self], {
            const OP: &str = "gelu_tanh";
            let portable = crate::are_portable_arithmetic_enabled();
            on_cuda!(self => crate::ops::cuda::gelu_tanh(self, None, portable));
            self.require_cpu(OP)?;
            with_float_dtype!(self.dtype(), OP, T => {
                let x = self.values::<T>()?;
                let out = crate::ops::par_map(&x, |x: T| forward(x, portable))?;
                Tensor::from_cpu_storage(T::into_storage(out), self.dims())
            })
        })
    }

    /// The gradient of [`Tensor::gelu_tanh`] at `input`, times `grad` (PyTorch's
    /// `gelu_backward(grad, input, approximate="tanh")`). Both must have the same dims,
    /// dtype and device.
    #[track_caller]
    pub fn gelu_tanh_backward(grad: &Tensor, input: &Tensor) -> Result<Tensor> {
        audited!("gelu_tanh_backward", [grad, input], {
            const OP: &str = "gelu_tanh_backward";
            grad.require_compatible(OP, input)?;
            grad.require_same_dims(OP, input)?;
            let portable = crate::are_portable_arithmetic_enabled();
            on_cuda!(input => crate::ops::cuda::gelu_tanh(input, Some(grad), portable));
            grad.require_cpu(OP)?;
            with_float_dtype!(grad.dtype(), OP, T => {
                let (g, x) = (grad.values::<T>()?, input.values::<T>()?);
                let out = build(g.len(), 1, PAR_MIN_LEN, |start, dst| {
                    for ((d, &g), &x) in dst.iter_mut().zip(&g[start..]).zip(&x[start..]) {
                        d.write(backward(g, x, portable));
                    }
                })?;
                Tensor::from_cpu_storage(T::into_storage(out), grad.dims())
            })
        })
    }
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
