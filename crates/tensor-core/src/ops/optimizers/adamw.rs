//! One AdamW step as one op over a parameter, its two moment buffers and its gradient:
//! `torch.optim.AdamW`'s single-tensor rule, element for element, on the CPU and as one
//! CUDA kernel.
//!
//! The rule, in the dtype, with the scalars computed in f64 on the host and rounded to
//! the dtype once (as PyTorch passes Python floats to its tensor ops):
//!
//! ```text
//! p = p * (1 - lr * weight_decay)                      (skipped when weight_decay = 0)
//! m = m + (1 - beta1) * (g - m)                        (torch.lerp, weight < 0.5;
//!   = g - (g - m) * beta1                               its other branch otherwise)
//! v = v * beta2 + (1 - beta2) * g * g
//! denom = sqrt(v) / sqrt(1 - beta2^step) + eps
//! p = p + (-lr / (1 - beta1^step)) * m / denom
//! ```
//!
//! Each `a op b op c` is evaluated left to right, every operation rounded (never fused),
//! and `sqrt` is correctly rounded: the same bits on every device, portable arithmetic
//! or not. `beta^step` is [`pow_steps`], square-and-multiply in f64 on the host (not
//! libm's `pow`, which may differ between machines in the last bit).

use crate::audit::OpRecorder;
use crate::{DType, Element, Result, Tensor, TensorError};

/// The hyper-parameters of one AdamW step, as `torch.optim.AdamW` names them, and the
/// parameter's step count after this step (1 for its first), which the bias
/// corrections use.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWStep {
    /// Learning rate.
    pub lr: f64,
    /// `beta1`: decay of the first moment (the running mean of gradients).
    pub beta1: f64,
    /// `beta2`: decay of the second moment (the running mean of squared gradients).
    pub beta2: f64,
    /// Added to the denominator, outside the square root.
    pub eps: f64,
    /// Decoupled weight decay: the parameter shrinks by `lr * weight_decay` each step.
    pub weight_decay: f64,
    /// This parameter's step count including this step (`>= 1`).
    pub step: u64,
}

/// The step's scalars, computed in f64 and rounded to the dtype once.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AdamWScalars<T> {
    /// `1 - lr * weight_decay`.
    pub decay_factor: T,
    /// Whether the parameter decays at all (`weight_decay != 0`).
    pub decay: bool,
    /// The lerp weight `1 - beta1`.
    pub lerp_weight: T,
    /// Whether the lerp takes its `weight < 0.5` branch.
    pub lerp_low: bool,
    pub beta2: T,
    /// `1 - beta2`.
    pub one_minus_beta2: T,
    /// `sqrt(1 - beta2^step)`.
    pub correction2_sqrt: T,
    pub eps: T,
    /// `-lr / (1 - beta1^step)`.
    pub neg_step_size: T,
}

impl<T: Element> AdamWScalars<T> {
    pub(crate) fn new(h: &AdamWStep) -> Self {
        let correction1 = 1.0 - pow_steps(h.beta1, h.step);
        let correction2 = 1.0 - pow_steps(h.beta2, h.step);
        let weight = 1.0 - h.beta1;
        AdamWScalars {
            decay_factor: T::from_f64(1.0 - h.lr * h.weight_decay),
            decay: h.weight_decay != 0.0,
            lerp_weight: T::from_f64(weight),
            lerp_low: weight.abs() < 0.5,
            beta2: T::from_f64(h.beta2),
            one_minus_beta2: T::from_f64(1.0 - h.beta2),
            correction2_sqrt: T::from_f64(correction2.sqrt()),
            eps: T::from_f64(h.eps),
            neg_step_size: T::from_f64(-(h.lr / correction1)),
        }
    }
}

/// `base^n` by square-and-multiply over the bits of `n`, low bit first, every product
/// a correctly rounded f64 multiplication: one fixed sequence of operations for each
/// `n`, so the same bits on every machine. Relative error about `n` ulps (each squaring
/// doubles it); in `1 - beta^n` that is below 1e-13 for any `beta <= 0.999`.
#[must_use]
pub fn pow_steps(base: f64, mut n: u64) -> f64 {
    let (mut result, mut square) = (1.0f64, base);
    while n > 0 {
        if n & 1 == 1 {
            result *= square;
        }
        n >>= 1;
        if n > 0 {
            square *= square;
        }
    }
    result
}

/// Errors on hyper-parameters `torch.optim.AdamW` rejects, and on a step count of 0.
fn check(op: &'static str, h: &AdamWStep) -> Result<()> {
    let bad = |message: String| Err(TensorError::InvalidArgument { op, message });
    if !(h.lr.is_finite() && h.lr >= 0.0) {
        return bad(format!("lr must be finite and >= 0, got {}", h.lr));
    }
    for (name, beta) in [("beta1", h.beta1), ("beta2", h.beta2)] {
        if !(0.0..1.0).contains(&beta) {
            return bad(format!("{name} must be in [0, 1), got {beta}"));
        }
    }
    if !(h.eps.is_finite() && h.eps >= 0.0) {
        return bad(format!("eps must be finite and >= 0, got {}", h.eps));
    }
    if !(h.weight_decay.is_finite() && h.weight_decay >= 0.0) {
        return bad(format!(
            "weight_decay must be finite and >= 0, got {}",
            h.weight_decay
        ));
    }
    if h.step == 0 {
        return bad("step counts this step too, so it is at least 1; got 0".into());
    }
    Ok(())
}

impl Tensor {
    /// One AdamW step in place on this parameter and its moment buffers `exp_avg` and
    /// `exp_avg_sq` (PyTorch's state names), from `grad`, by the rule of the module
    /// docs: bit-identical on every device.
    ///
    /// All four tensors must be contiguous, of one float dtype (f32 or f64), one device
    /// and one shape, and the hyper-parameters in PyTorch's ranges; anything else is a
    /// typed error and nothing is written.
    #[track_caller]
    pub fn adamw_step_(
        &mut self,
        exp_avg: &mut Tensor,
        exp_avg_sq: &mut Tensor,
        grad: &Tensor,
        hyper: &AdamWStep,
    ) -> Result<()> {
        const OP: &str = "adamw_step_";
        check_tensors(OP, [&*self, &*exp_avg, &*exp_avg_sq, grad], hyper)?;
        let recorder = OpRecorder::begin("adamw_step", &[&*self, exp_avg, exp_avg_sq, grad]);
        let result = self.adamw_step_on_device(exp_avg, exp_avg_sq, grad, hyper);
        if result.is_ok() {
            recorder.finish(self);
        }
        result
    }

    fn adamw_step_on_device(
        &mut self,
        m: &mut Tensor,
        v: &mut Tensor,
        grad: &Tensor,
        hyper: &AdamWStep,
    ) -> Result<()> {
        on_cuda!(self => crate::ops::cuda::adamw_step_(self, m, v, grad, hyper));
        self.require_cpu("adamw_step_")?;
        match self.dtype() {
            DType::F32 => cpu_step::<f32>(self, m, v, grad, &AdamWScalars::new(hyper)),
            _ => cpu_step::<f64>(self, m, v, grad, &AdamWScalars::new(hyper)),
        }
    }
}

/// Errors unless `[param, exp_avg, exp_avg_sq, grad]` are contiguous tensors of one
/// float dtype (f32 or f64), device and shape, and the hyper-parameters valid.
fn check_tensors(op: &'static str, tensors: [&Tensor; 4], hyper: &AdamWStep) -> Result<()> {
    let [param, ..] = tensors;
    for other in &tensors[1..] {
        param.require_compatible(op, other)?;
        param.require_same_dims(op, other)?;
    }
    for t in tensors {
        if !t.is_contiguous() {
            return Err(TensorError::NotContiguous {
                op,
                dims: t.dims().to_vec(),
                strides: t.strides().to_vec(),
            });
        }
    }
    if !matches!(param.dtype(), DType::F32 | DType::F64) {
        return Err(TensorError::UnsupportedDType {
            op,
            dtype: param.dtype(),
            supported: "f32, f64",
        });
    }
    check(op, hyper)
}

/// Parameters per launch of the CUDA kernel (`DITTO_ADAMW_MANY` in
/// `cuda/transformer_ops.cuh`): their pointers and scalars fill under 2.5 KiB of the
/// 4 KiB of kernel arguments every CUDA device takes.
pub const ADAMW_MANY: usize = 24;

/// One parameter's share of [`adamw_step_many_`](crate::ops::adamw_step_many_): the tensors
/// [`Tensor::adamw_step_`] takes, and its hyper-parameters (its own step count, its
/// group's learning rate and weight decay).
#[derive(Debug)]
pub struct AdamWSlot<'a> {
    /// The parameter, updated in place.
    pub param: &'a mut Tensor,
    /// Its first moment, updated in place.
    pub exp_avg: &'a mut Tensor,
    /// Its second moment, updated in place.
    pub exp_avg_sq: &'a mut Tensor,
    /// Its gradient.
    pub grad: &'a Tensor,
    /// The step's hyper-parameters for this parameter.
    pub hyper: crate::ops::AdamWStep,
}

/// [`check_tensors`] for one slot of `adamw_step_many_`.
pub(crate) fn check_slot(op: &'static str, slot: &AdamWSlot<'_>) -> Result<()> {
    let tensors = [&*slot.param, &*slot.exp_avg, &*slot.exp_avg_sq, slot.grad];
    check_tensors(op, tensors, &slot.hyper)
}

/// One checked slot's step, by the single-tensor op (any device).
pub(crate) fn cpu_slot(slot: &mut AdamWSlot<'_>) -> Result<()> {
    slot.param
        .adamw_step_(slot.exp_avg, slot.exp_avg_sq, slot.grad, &slot.hyper)
}

/// The rule for one element (module docs), in place.
pub(crate) fn element<T>(p: &mut T, m: &mut T, v: &mut T, g: T, s: &AdamWScalars<T>)
where
    T: crate::ops::Float + SquareRoot,
{
    if s.decay {
        *p = *p * s.decay_factor;
    }
    *m = if s.lerp_low {
        *m + s.lerp_weight * (g - *m)
    } else {
        g - (g - *m) * (T::from_f64(1.0) - s.lerp_weight)
    };
    *v = *v * s.beta2 + s.one_minus_beta2 * g * g;
    let denom = v.square_root() / s.correction2_sqrt + s.eps;
    *p = *p + s.neg_step_size * *m / denom;
}

/// Correctly rounded square root of f32 / f64.
pub(crate) trait SquareRoot {
    fn square_root(self) -> Self;
}

impl SquareRoot for f32 {
    fn square_root(self) -> f32 {
        self.sqrt()
    }
}

impl SquareRoot for f64 {
    fn square_root(self) -> f64 {
        self.sqrt()
    }
}

fn cpu_step<T: crate::ops::Float + SquareRoot>(
    value: &mut Tensor,
    m: &mut Tensor,
    v: &mut Tensor,
    grad: &Tensor,
    s: &AdamWScalars<T>,
) -> Result<()> {
    let g = grad.as_slice::<T>()?;
    let m = m.as_mut_slice::<T>()?;
    let v = v.as_mut_slice::<T>()?;
    let p = value.as_mut_slice::<T>()?;
    for (((p, m), v), &g) in p.iter_mut().zip(m.iter_mut()).zip(v.iter_mut()).zip(g) {
        element(p, m, v, g, s);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;

    #[test]
    fn powers_by_squaring_are_close_to_powf() {
        assert_eq!(pow_steps(0.9, 0), 1.0);
        assert_eq!(pow_steps(0.9, 1), 0.9);
        for n in [2u64, 3, 7, 100, 1000, 123_457] {
            let (a, b) = (pow_steps(0.999, n), 0.999f64.powf(n as f64));
            // Each squaring doubles the relative error: about n ulps at worst.
            assert!(
                (a - b).abs() <= 2.3e-16 * n as f64 * b.abs(),
                "{n}: {a} vs {b}"
            );
        }
    }

    #[test]
    fn one_step_matches_the_formula() {
        let t = |v: Vec<f64>| Tensor::from_vec(v, &[3], Device::Cpu).unwrap();
        let (mut p, mut m, mut v) = (t(vec![1.0, -2.0, 0.5]), t(vec![0.0; 3]), t(vec![0.0; 3]));
        let g = t(vec![0.1, -0.3, 2.0]);
        let h = AdamWStep {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            step: 1,
        };
        p.adamw_step_(&mut m, &mut v, &g, &h).unwrap();
        let got = p.to_vec::<f64>().unwrap();
        for (i, (&p0, &g)) in [1.0, -2.0, 0.5].iter().zip(&[0.1, -0.3, 2.0]).enumerate() {
            let decayed = p0 * (1.0 - 0.01 * 0.1);
            let (m1, v1): (f64, f64) = (0.1 * g, 0.05 * g * g);
            let want = decayed - 0.01 / 0.1 * m1 / (v1.sqrt() / 0.05f64.sqrt() + 1e-8);
            assert!((got[i] - want).abs() < 1e-12, "{i}: {} vs {want}", got[i]);
        }
        let zero = AdamWStep { step: 0, ..h };
        assert!(p.adamw_step_(&mut m, &mut v, &g, &zero).is_err());
        let bad = AdamWStep { beta2: 1.0, ..h };
        assert!(p.adamw_step_(&mut m, &mut v, &g, &bad).is_err());
    }
}
