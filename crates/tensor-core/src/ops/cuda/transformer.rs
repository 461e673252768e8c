//! The transformer ops on CUDA tensors (GELU, layer norm, causal softmax, batched
//! matmul, AdamW). Not yet implemented on the device: each returns
//! `NotImplementedOnDevice`, a typed error naming the op.

use crate::ops::AdamWStep;
use crate::{Result, Tensor, TensorError};

fn not_yet(op: &'static str, t: &Tensor) -> TensorError {
    TensorError::NotImplementedOnDevice {
        op,
        device: t.device(),
    }
}

pub(crate) fn gelu_tanh(x: &Tensor, _grad: Option<&Tensor>, _portable: bool) -> Result<Tensor> {
    Err(not_yet("gelu_tanh", x))
}

pub(crate) fn layer_norm(
    x: &Tensor,
    _weight: Option<&Tensor>,
    _bias: Option<&Tensor>,
    _eps: f64,
) -> Result<(Tensor, Tensor, Tensor)> {
    Err(not_yet("layer_norm", x))
}

pub(crate) fn layer_norm_backward(
    _grad: &Tensor,
    x: &Tensor,
    _mean: &Tensor,
    _rstd: &Tensor,
    _weight: Option<&Tensor>,
) -> Result<(Tensor, Tensor, Tensor)> {
    Err(not_yet("layer_norm_backward", x))
}

pub(crate) fn causal_softmax(x: &Tensor, _scale: f64, _portable: bool) -> Result<Tensor> {
    Err(not_yet("causal_softmax", x))
}

pub(crate) fn causal_softmax_backward(
    _grad: &Tensor,
    probs: &Tensor,
    _scale: f64,
) -> Result<Tensor> {
    Err(not_yet("causal_softmax_backward", probs))
}

pub(crate) fn batched_matmul(lhs: &Tensor, _rhs: &Tensor, _dims: &[usize]) -> Result<Tensor> {
    Err(not_yet("matmul", lhs))
}

pub(crate) fn adamw_step_(
    value: &mut Tensor,
    _m: &mut Tensor,
    _v: &mut Tensor,
    _grad: &Tensor,
    _hyper: &AdamWStep,
) -> Result<()> {
    Err(not_yet("adamw_step_", value))
}
