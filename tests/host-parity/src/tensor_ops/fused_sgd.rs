//! The fused SGD kernel's body (`ditto_sgd_momentum_op`) run on the host over every
//! element, with the scalars the CUDA launcher rounds, so the parity tests can hold it
//! against [`Tensor::sgd_momentum_step_`] on the CPU without a GPU.

use tensor_core::ops::optimizers::fused_sgd::{SgdMomentumStep, StepScalars};
use tensor_core::{DType, Result, Tensor, TensorError};

mod ffi {
    macro_rules! host_sgd {
        ($t:ty, $name:ident) => {
            extern "C" {
                pub fn $name(
                    n: u64,
                    weight_decay: $t,
                    momentum: $t,
                    keep: $t,
                    step: $t,
                    decay: i32,
                    nesterov: i32,
                    g: *const $t,
                    b: *mut $t,
                    p: *mut $t,
                );
            }
        };
    }
    host_sgd!(f32, ditto_host_sgd_momentum_f32);
    host_sgd!(f64, ditto_host_sgd_momentum_f64);
}

/// The updated parameter and momentum buffer, as new tensors (`value`, `buf` and `grad`
/// of one float dtype and one element count; dense copies are handed to the body).
pub fn sgd_momentum_step(
    value: &Tensor,
    buf: &Tensor,
    grad: &Tensor,
    hyper: &SgdMomentumStep,
) -> Result<(Tensor, Tensor)> {
    for other in [buf, grad] {
        value.require_compatible("host_parity", other)?;
        value.require_same_dims("host_parity", other)?;
    }
    macro_rules! run {
        ($t:ty, $f:ident) => {{
            let s = StepScalars::<$t>::new(hyper);
            let g = grad.to_vec::<$t>()?;
            let (mut b, mut p) = (buf.to_vec::<$t>()?, value.to_vec::<$t>()?);
            let (decay, nesterov) = (i32::from(s.decay), i32::from(s.nesterov));
            // SAFETY: `g`, `b` and `p` hold the same n elements.
            unsafe {
                ffi::$f(
                    g.len() as u64,
                    s.weight_decay,
                    s.momentum,
                    s.keep,
                    s.step,
                    decay,
                    nesterov,
                    g.as_ptr(),
                    b.as_mut_ptr(),
                    p.as_mut_ptr(),
                )
            };
            let dims = value.dims();
            Ok((
                Tensor::from_vec(p, dims, tensor_core::Device::Cpu)?,
                Tensor::from_vec(b, dims, tensor_core::Device::Cpu)?,
            ))
        }};
    }
    match value.dtype() {
        DType::F32 => run!(f32, ditto_host_sgd_momentum_f32),
        DType::F64 => run!(f64, ditto_host_sgd_momentum_f64),
        other => Err(TensorError::UnsupportedDType {
            op: "host_parity sgd_momentum_step",
            dtype: other,
            supported: "f32, f64",
        }),
    }
}
