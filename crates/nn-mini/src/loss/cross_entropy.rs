//! `cross_entropy`: mean negative log-likelihood of integer class targets.

use tensor_core::{DType, Tensor};

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
    if targets.dtype() != DType::I64 || targets.dims() != [batch] {
        return Err(NnError::invalid(
            OP,
            format!(
                "targets must be [{batch}] of i64 class indices, got {:?} of {}",
                targets.dims(),
                targets.dtype()
            ),
        ));
    }
    // The check needs the values on the host: free for host targets (the training
    // loop's, which then go to the device once); targets already on a GPU are read back.
    for (row, &target) in targets.to_vec::<i64>()?.iter().enumerate() {
        if usize::try_from(target).map_or(true, |c| c >= classes) {
            return Err(NnError::InvalidTarget {
                op: OP,
                row,
                target,
                classes,
            });
        }
    }
    // Both picks run where the logits are (device kernels on a GPU: no copy back).
    let targets = targets.to_device(logits.device())?;
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
