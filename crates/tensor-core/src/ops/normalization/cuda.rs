//! Layer norm over the last dimension on CUDA tensors, and its backward, following the
//! CPU op's documented order of operations (`ops/normalization/mod.rs`).
//!
//! A block of threads per row (`cuda/row_ops.cu`) for the output and the input gradient:
//! the threads share the loads and per-element terms, and the row sums keep the
//! contract's order. The weight and bias gradients are sums over rows in two passes
//! (`cuda/tensor_ops.cu`): one work item per (block of rows, column) writes its f64
//! partial, then one per column adds its partials in order. Never atomics: there is only
//! a deterministic path, and under portable arithmetic (f32, docs/contract.md §14) it
//! gives the CPU's bits.

use cudarc::driver::PushKernelArg;

use crate::ops::cuda::{dense, dense_view, output_storage, storage_of, uninit};
use crate::ops::elementwise::cuda::{kernel_for, row_kernel_for};
use crate::ops::REDUCE_BLOCK;
use crate::{Result, Tensor};

/// `(rows, c)` of a `[..., c]` tensor (the caller checked `c > 0`).
fn rows_and_width(x: &Tensor) -> (u64, u64) {
    let c = x.dims().last().copied().unwrap_or(1).max(1);
    ((x.elem_count() / c) as u64, c as u64)
}

/// `x`'s dims with the last one 1: the dims of `mean` and `rstd`.
fn stats_dims(x: &Tensor) -> Vec<usize> {
    let mut dims = x.dims().to_vec();
    if let Some(last) = dims.last_mut() {
        *last = 1;
    }
    dims
}

/// Layer norm over the last dimension: `(output, mean, rstd)`. Shapes, dtypes, devices
/// and `eps` were checked by the caller.
pub(crate) fn layer_norm(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<(Tensor, Tensor, Tensor)> {
    const OP: &str = "layer_norm";
    let x = dense(x)?;
    let ordinal = storage_of(&x)?.1;
    let (rows, c) = rows_and_width(&x);
    let stats = stats_dims(&x);
    let mut out = uninit(x.dims(), x.dtype(), ordinal)?;
    let mut mean = uninit(&stats, x.dtype(), ordinal)?;
    let mut rstd = uninit(&stats, x.dtype(), ordinal)?;
    if rows == 0 {
        return Ok((out, mean, rstd));
    }
    let kernel = row_kernel_for(OP, OP, &x, rows)?;
    let (weight, bias) = (weight.map(dense).transpose()?, bias.map(dense).transpose()?);
    let (w_view, b_view) = (
        weight.as_ref().map(dense_view).transpose()?,
        bias.as_ref().map(dense_view).transpose()?,
    );
    let x_view = dense_view(&x)?;
    let stream = storage_of(&x)?.0.stream()?;
    let null: u64 = 0;
    let out_dst = output_storage(&mut out)?;
    let mean_dst = output_storage(&mut mean)?;
    let rstd_dst = output_storage(&mut rstd)?;
    let mut args = kernel.args(&stream);
    args.arg(&rows).arg(&c).arg(&eps).arg(&x_view);
    match &w_view {
        Some(w) => args.arg(w),
        None => args.arg(&null),
    };
    match &b_view {
        Some(b) => args.arg(b),
        None => args.arg(&null),
    };
    args.arg(out_dst.bytes_mut())
        .arg(mean_dst.bytes_mut())
        .arg(rstd_dst.bytes_mut());
    // SAFETY: matches `ditto_layer_norm_<T>(u64 rows, u64 c, double eps, const T* x,
    // const T* w, const T* b, T* out, T* mean, T* rstd)`: x and out hold rows * c dense
    // elements, w and b c elements or NULL (absent), mean and rstd `rows` elements.
    unsafe { kernel.launch(args) }?;
    Ok((out, mean, rstd))
}

/// The gradients of layer norm: `(input, weight, bias)`; the caller checked every shape.
pub(crate) fn layer_norm_backward(
    grad: &Tensor,
    x: &Tensor,
    mean: &Tensor,
    rstd: &Tensor,
    weight: Option<&Tensor>,
) -> Result<(Tensor, Tensor, Tensor)> {
    const OP: &str = "layer_norm_backward";
    let (dy, x, mean, rstd) = (dense(grad)?, dense(x)?, dense(mean)?, dense(rstd)?);
    let weight = weight.map(dense).transpose()?;
    let ordinal = storage_of(&x)?.1;
    let (rows, c) = rows_and_width(&x);
    let width = c as usize;
    let mut dx = uninit(x.dims(), x.dtype(), ordinal)?;
    if rows == 0 {
        // Zeros: with no rows the parameter gradients are empty sums.
        let zeros = || crate::ops::cuda::empty(&[width], x.dtype(), ordinal);
        return Ok((dx, zeros()?, zeros()?));
    }
    // Every column's finishing item writes its element of both (no memset needed).
    let mut dw = uninit(&[width], x.dtype(), ordinal)?;
    let mut db = uninit(&[width], x.dtype(), ordinal)?;
    let views = [&dy, &x, &mean, &rstd].map(dense_view);
    let [dy_view, x_view, mean_view, rstd_view] = views;
    let (dy_view, x_view) = (dy_view?, x_view?);
    let (mean_view, rstd_view) = (mean_view?, rstd_view?);
    let w_view = weight.as_ref().map(dense_view).transpose()?;
    let stream = storage_of(&x)?.0.stream()?;
    let null: u64 = 0;

    let rows_kernel = row_kernel_for(OP, "layer_norm_backward", &x, rows)?;
    let dx_dst = output_storage(&mut dx)?;
    let mut args = rows_kernel.args(&stream);
    args.arg(&rows)
        .arg(&c)
        .arg(&dy_view)
        .arg(&x_view)
        .arg(&mean_view)
        .arg(&rstd_view);
    match &w_view {
        Some(w) => args.arg(w),
        None => args.arg(&null),
    };
    args.arg(dx_dst.bytes_mut());
    // SAFETY: matches `ditto_layer_norm_backward_<T>(u64 rows, u64 c, const T* dy, const
    // T* x, const T* mean, const T* rstd, const T* w, T* dx)`: dy, x, dx hold rows * c
    // dense elements, mean and rstd `rows`, w `c` or NULL.
    unsafe { rows_kernel.launch(args) }?;

    // Pass 1: f64 partials of every (block of REDUCE_BLOCK rows, column), block-major.
    let blocks = rows.div_ceil(REDUCE_BLOCK as u64);
    let partials = (blocks * c) as usize;
    let mut part_w = uninit(&[partials], crate::DType::F64, ordinal)?;
    let mut part_b = uninit(&[partials], crate::DType::F64, ordinal)?;
    let partials_kernel = kernel_for(OP, "layer_norm_param_partials", &x, blocks * c)?;
    let part_w_dst = output_storage(&mut part_w)?;
    let part_b_dst = output_storage(&mut part_b)?;
    let mut args = partials_kernel.args(&stream);
    args.arg(&rows)
        .arg(&c)
        .arg(&dy_view)
        .arg(&x_view)
        .arg(&mean_view)
        .arg(&rstd_view)
        .arg(part_w_dst.bytes_mut())
        .arg(part_b_dst.bytes_mut());
    // SAFETY: matches `ditto_layer_norm_param_partials_<T>(u64 rows, u64 c, const T* dy,
    // const T* x, const T* mean, const T* rstd, double* part_w, double* part_b)`, sizes
    // as above; each partial buffer holds blocks * c f64 values.
    unsafe { partials_kernel.launch(args) }?;

    // Pass 2: each column's partials in block order, rounded once.
    let finish_kernel = kernel_for(OP, "layer_norm_param_finish", &x, c)?;
    let (part_w_view, part_b_view) = (dense_view(&part_w)?, dense_view(&part_b)?);
    let dw_dst = output_storage(&mut dw)?;
    let db_dst = output_storage(&mut db)?;
    let mut args = finish_kernel.args(&stream);
    args.arg(&blocks)
        .arg(&c)
        .arg(&part_w_view)
        .arg(&part_b_view)
        .arg(dw_dst.bytes_mut())
        .arg(db_dst.bytes_mut());
    // SAFETY: matches `ditto_layer_norm_param_finish_<T>(u64 blocks, u64 c, const double*
    // part_w, const double* part_b, T* dw, T* db)`: the partials as written above, dw and
    // db `c` elements.
    unsafe { finish_kernel.launch(args) }?;
    Ok((dx, dw, db))
}
