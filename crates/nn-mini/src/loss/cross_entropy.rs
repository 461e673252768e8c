//! `cross_entropy`: mean negative log-likelihood of integer class targets.

use tensor_core::Tensor;

use super::ClassTargets;

use crate::{NnError, Result};

/// `torch.nn.functional.cross_entropy(logits, targets)` with mean reduction, and its
/// gradient with respect to `logits`.
///
/// `logits` is `[batch, classes]` (f32 or f64), `targets` is `[batch]` of i64 class
/// indices. Returns `(loss, grad)`: `loss` is a one-element tensor in the logits' dtype,
/// `grad = (softmax(logits) - onehot(targets)) / batch`. Computed from `log_softmax`, so
/// large logits do not overflow. A target outside `[0, classes)` is an error naming the
/// row (PyTorch raises too; `ignore_index` and label smoothing are not supported).
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<(Tensor, Tensor)> {
    const OP: &str = "cross_entropy";
    if logits.rank() != 2 || logits.dims()[0] == 0 {
        return Err(NnError::invalid(
            OP,
            format!(
                "logits must be [batch > 0, classes], got {:?}",
                logits.dims()
            ),
        ));
    }
    let (batch, classes) = (logits.dims()[0], logits.dims()[1]);
    if targets.dims() != [batch] {
        return Err(NnError::invalid(
            OP,
            format!(
                "targets must be [{batch}] of i64 class indices, got {:?} of {}",
                targets.dims(),
                targets.dtype()
            ),
        ));
    }
    let targets = ClassTargets::new(OP, targets, classes, logits.device())?;
    cross_entropy_with(logits, &targets)
}

/// [`cross_entropy`] with targets checked beforehand ([`ClassTargets`]): nothing is read
/// back to the host, so on a GPU the whole loss is kernels (a CUDA graph can hold it).
/// Errors when the logits are not `[batch, classes]` for the targets' batch and class
/// count, or are on another device.
pub fn cross_entropy_with(logits: &Tensor, targets: &ClassTargets) -> Result<(Tensor, Tensor)> {
    const OP: &str = "cross_entropy";
    let want = [targets.tensor().elem_count(), targets.classes()];
    if logits.dims() != want || logits.device() != targets.tensor().device() {
        return Err(NnError::invalid(
            OP,
            format!(
                "logits must be {want:?} on {}, got {:?} on {}",
                targets.tensor().device(),
                logits.dims(),
                logits.device()
            ),
        ));
    }
    let (batch, classes) = (want[0], want[1]);
    let targets = targets.tensor();
    // Both picks run where the logits are (device kernels on a GPU: no copy back).
    let log_probs = logits.log_softmax(1)?;
    let loss = log_probs
        .gather(1, &targets.reshape(&[batch, 1])?)?
        .sum_all()?
        .mul_scalar(-1.0 / batch as f64)?;
    let onehot = targets.one_hot(classes, logits.dtype())?;
    let grad = log_probs
        .exp()?
        .sub(&onehot)?
        .mul_scalar(1.0 / batch as f64)?;
    Ok((loss, grad))
}
