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
    let mut picked = Vec::with_capacity(batch);
    let mut onehot = vec![0.0f64; batch * classes];
    for (row, &target) in targets.to_vec::<i64>()?.iter().enumerate() {
        let class = usize::try_from(target)
            .ok()
            .filter(|&c| c < classes)
            .ok_or(NnError::InvalidTarget {
                op: OP,
                row,
                target,
                classes,
            })?;
        picked.push(row * classes + class);
        onehot[row * classes + class] = 1.0;
    }
    let log_probs = logits.log_softmax(1)?;
    let loss = log_probs
        .reshape(&[batch * classes])?
        .index_select(0, &picked)?
        .sum_all()?
        .mul_scalar(-1.0 / batch as f64)?;
    // Made in the logits' dtype on the host (0 and 1 are exact in both), so a device
    // gets one upload and no conversion there.
    let onehot = match logits.dtype() {
        DType::F32 => {
            let onehot: Vec<f32> = onehot.into_iter().map(|v| v as f32).collect();
            Tensor::from_vec(onehot, &[batch, classes], logits.device())?
        }
        _ => Tensor::from_vec(onehot, &[batch, classes], logits.device())?
            .to_dtype(logits.dtype())?,
    };
    let grad = log_probs
        .exp()?
        .sub(&onehot)?
        .mul_scalar(1.0 / batch as f64)?;
    Ok((loss, grad))
}
