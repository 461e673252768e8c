//! `clip_grad_norm_`: global gradient-norm clipping, PyTorch's
//! `torch.nn.utils.clip_grad_norm_` with the 2-norm.

use crate::{Module, NnError, Result};

/// Scales every gradient of `module` so that their global 2-norm is at most
/// `max_norm`, and returns the norm before clipping (PyTorch's
/// `clip_grad_norm_(parameters, max_norm)`):
///
/// ```text
/// total = sqrt(sum over parameters of sum(g^2))
/// coef  = max_norm / (total + 1e-6);  if coef < 1, every g = g * coef
/// ```
///
/// Each parameter's `sum(g^2)` is [`Tensor::sum_all`](tensor_core::Tensor::sum_all) of
/// `g * g` (the blocked f64 order, the same bits on every device), rounded to the
/// dtype; the parameters' sums are added in f64 in parameter order, and the square root
/// and `coef` are f64. A non-finite norm (an overflowing or NaN gradient) is returned
/// as it is and nothing is scaled: the caller decides (a training loop reports it).
/// Parameters without a gradient are skipped.
pub fn clip_grad_norm_(module: &mut dyn Module, max_norm: f64) -> Result<f64> {
    if !(max_norm.is_finite() && max_norm > 0.0) {
        return Err(NnError::invalid(
            "clip_grad_norm_",
            format!("max_norm must be finite and > 0, got {max_norm}"),
        ));
    }
    let mut total = 0.0f64;
    for param in module.parameters() {
        if let Some(g) = &param.grad {
            let squares = g.mul(g)?.sum_all()?;
            total += squares
                .to_dtype(tensor_core::DType::F64)?
                .to_scalar::<f64>()?;
        }
    }
    let norm = total.sqrt();
    if !norm.is_finite() {
        return Ok(norm);
    }
    let coef = max_norm / (norm + 1e-6);
    if coef < 1.0 {
        for param in module.parameters_mut() {
            if let Some(g) = &mut param.grad {
                g.scale_(coef)?;
            }
        }
    }
    Ok(norm)
}
