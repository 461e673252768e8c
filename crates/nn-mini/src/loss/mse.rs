//! `mse_loss`: mean squared error.

use tensor_core::Tensor;

use crate::{NnError, Result};

/// `torch.nn.functional.mse_loss(pred, target)` with mean reduction, and its gradient
/// with respect to `pred`.
///
/// `pred` and `target` must have the same dims and float dtype (no broadcasting: PyTorch
/// only warns when it broadcasts here, and that is nearly always a bug). Returns
/// `(loss, grad)` with `loss = mean((pred - target)^2)` as a one-element tensor and
/// `grad = 2 (pred - target) / n`.
pub fn mse_loss(pred: &Tensor, target: &Tensor) -> Result<(Tensor, Tensor)> {
    if pred.dims() != target.dims() || pred.elem_count() == 0 {
        return Err(NnError::invalid(
            "mse_loss",
            format!(
                "pred and target must have the same non-empty dims, got {:?} and {:?}",
                pred.dims(),
                target.dims()
            ),
        ));
    }
    let diff = pred.sub(target)?;
    let loss = diff.mul(&diff)?.mean_all()?;
    let grad = diff.mul_scalar(2.0 / pred.elem_count() as f64)?;
    Ok((loss, grad))
}
