//! The causal softmax of attention scores on CUDA tensors, and its backward: the unfused
//! path (portable arithmetic, and wherever the fused attention of the `kernels` crate
//! does not apply). The kernels are in `cuda/row_ops.cu`, a block of threads per row,
//! following the CPU op's documented order of operations (`ops/attention/mod.rs`); the
//! batched matmuls around them are `batched_matmul.rs`.
//!
//! Each row's sums run in the contract's order whatever the block, so there is only a
//! deterministic path; under portable arithmetic (f32, docs/contract.md §14) `exp` is
//! ditto's own and the bits are the CPU's, otherwise libdevice's.

use cudarc::driver::PushKernelArg;

use crate::ops::cuda::{dense, dense_view, output_storage, storage_of, uninit};
use crate::ops::elementwise::cuda::{push_scalar, row_kernel_for, Scalar};
use crate::{DType, Result, Tensor};

/// `(rows, t)` of attention scores `[..., t, t]` (the caller checked the last two dims
/// are equal); `None` when empty.
fn score_rows(x: &Tensor) -> Option<(u64, u64)> {
    let t = x.dims().last().copied().unwrap_or(0);
    (t > 0 && x.elem_count() > 0).then(|| ((x.elem_count() / t) as u64, t as u64))
}

/// The causal softmax of `x * scale` along the last dimension (ops/attention/mod.rs).
pub(crate) fn causal_softmax(x: &Tensor, scale: f64, portable: bool) -> Result<Tensor> {
    const OP: &str = "causal_softmax";
    let x = dense(x)?;
    let ordinal = storage_of(&x)?.1;
    let mut out = uninit(x.dims(), x.dtype(), ordinal)?;
    let Some((rows, t)) = score_rows(&x) else {
        return Ok(out);
    };
    let kernel = row_kernel_for(OP, OP, &x, rows)?;
    let scale = Scalar::of(x.dtype(), scale);
    let portable = i32::from(portable);
    let x_view = dense_view(&x)?;
    let dst = output_storage(&mut out)?;
    let stream = dst.stream()?;
    let mut args = kernel.args(&stream);
    args.arg(&rows).arg(&t);
    push_scalar!(args, &scale);
    args.arg(&portable).arg(&x_view).arg(dst.bytes_mut());
    // SAFETY: matches `ditto_causal_softmax_<T>(u64 rows, u64 t, T scale, int portable,
    // const T* x, T* out)`: both hold rows * t dense elements.
    unsafe { kernel.launch(args) }?;
    Ok(out)
}

/// The gradient of the causal softmax with respect to its unscaled scores.
pub(crate) fn causal_softmax_backward(grad: &Tensor, probs: &Tensor, scale: f64) -> Result<Tensor> {
    const OP: &str = "causal_softmax_backward";
    let (dp, p) = (dense(grad)?, dense(probs)?);
    let ordinal = storage_of(&p)?.1;
    let mut out = uninit(p.dims(), p.dtype(), ordinal)?;
    let Some((rows, t)) = score_rows(&p) else {
        return Ok(out);
    };
    let kernel = row_kernel_for(OP, OP, &p, rows)?;
    // The scale rounded to the dtype first, then used in f64 (as on the CPU).
    let scale = match p.dtype() {
        DType::F32 => f64::from(scale as f32),
        _ => scale,
    };
    let (dp_view, p_view) = (dense_view(&dp)?, dense_view(&p)?);
    let dst = output_storage(&mut out)?;
    let stream = dst.stream()?;
    let mut args = kernel.args(&stream);
    args.arg(&rows)
        .arg(&t)
        .arg(&scale)
        .arg(&dp_view)
        .arg(&p_view)
        .arg(dst.bytes_mut());
    // SAFETY: matches `ditto_causal_softmax_backward_<T>(u64 rows, u64 t, double scale,
    // const T* dp, const T* p, T* dx)`: all hold rows * t dense elements.
    unsafe { kernel.launch(args) }?;
    Ok(out)
}
