//! One SGD step of one parameter in a single pass over its elements.
//!
//! [`Sgd::step`](super::Sgd::step) written with whole-tensor ops reads and writes the
//! momentum buffer and the parameter three times (`scale_`, `axpy_`, `axpy_`). This pass
//! does the same per-element operations, in the same order and precision (every
//! `a + b * c` a multiply then an add, scalars rounded to the dtype first, as `axpy_`
//! and `scale_` do), so the result is bit-identical; only memory traffic drops.

use std::ops::{Add, Mul};

use tensor_core::audit::OpRecorder;
use tensor_core::{DType, Device, Element, Tensor};

use super::SgdConfig;
use crate::Result;

/// Applies the update to `value` and `buf` (an existing momentum buffer; `momentum` must
/// be non-zero) from `grad`, and returns true; returns false without touching anything
/// when the tensors are not contiguous CPU f32 / f64 of one dtype and size, in which case
/// the caller uses the whole-tensor ops (which also run on CUDA).
pub(crate) fn momentum_step(
    value: &mut Tensor,
    buf: &mut Tensor,
    grad: &Tensor,
    config: &SgdConfig,
) -> Result<bool> {
    let same = |t: &Tensor| {
        t.device() == Device::Cpu
            && t.dtype() == value.dtype()
            && t.dims() == value.dims()
            && t.is_contiguous()
    };
    if !(same(value) && same(buf) && same(grad)) {
        return Ok(false);
    }
    if !matches!(value.dtype(), DType::F32 | DType::F64) {
        return Ok(false);
    }
    // The pass writes raw buffers, so it records itself in the audit like a tensor op:
    // inputs hashed before the update, the updated parameter as the output (the buffer
    // shows up as an input of the next step).
    let recorder = OpRecorder::begin("sgd_momentum_step", &[value, buf, grad]);
    match value.dtype() {
        DType::F32 => run::<f32>(value, buf, grad, config)?,
        _ => run::<f64>(value, buf, grad, config)?,
    }
    recorder.finish(value);
    Ok(true)
}

/// The rule of [`Sgd`](super::Sgd) for one element each of `p`, `buf` and `g`, after the
/// first step: `d = g + weight_decay * p`, `buf = buf * momentum + (1 - dampening) * d`,
/// `d = d + momentum * buf` (Nesterov) or `d = buf`, `p = p + (-lr) * d`.
fn run<T>(value: &mut Tensor, buf: &mut Tensor, grad: &Tensor, config: &SgdConfig) -> Result<()>
where
    T: Element + Add<Output = T> + Mul<Output = T>,
{
    let weight_decay = T::from_f64(config.weight_decay);
    let momentum = T::from_f64(config.momentum);
    let keep = T::from_f64(1.0 - config.dampening);
    let step = T::from_f64(-config.lr);
    let (decay, nesterov) = (config.weight_decay != 0.0, config.nesterov);
    let g = grad.as_slice::<T>()?;
    let b = buf.as_mut_slice::<T>()?;
    let p = value.as_mut_slice::<T>()?;
    for ((p, b), &g) in p.iter_mut().zip(b.iter_mut()).zip(g) {
        let d = if decay { g + weight_decay * *p } else { g };
        *b = *b * momentum + keep * d;
        let d = if nesterov { d + momentum * *b } else { *b };
        *p = *p + step * d;
    }
    Ok(())
}
