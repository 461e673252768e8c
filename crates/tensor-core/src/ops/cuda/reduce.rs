//! Reductions along one dimension on the device: sums and means (in the CPU's blocked
//! order, so bit-identical to it), maxima with their indices, and `log_softmax`.
//!
//! A tensor is seen as `(outer, size, inner)` around the reduced dimension; a lane is one
//! `(outer, inner)` pair, and each lane belongs to one thread.

use cudarc::driver::PushKernelArg;

use super::elementwise::float_suffix;
use super::storage_of;
use super::{dense, dense_view, kernel, launch_config, launch_failed, output_storage, uninit};
use crate::cuda::CudaStorage;
use crate::ops::kernel_layout::lanes;
use crate::ops::reduce::reduced_dims;
use crate::ops::REDUCE_BLOCK;
use crate::{DType, Result, Tensor};

/// Whether a sum is divided by the lane length afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SumKind {
    Sum,
    Mean,
}

/// Sum or mean along `dim` (`None`: of every element, as a rank-0 tensor). The caller
/// checked that `dim` is in range.
pub(crate) fn sum_dim(
    name: &'static str,
    kind: SumKind,
    t: &Tensor,
    dim: Option<usize>,
    keepdim: bool,
) -> Result<Tensor> {
    let suffix = float_suffix(name, t.dtype())?;
    let x = dense(t)?;
    let ordinal = storage_of(&x)?.1;
    let (outer, size, inner) = lanes(t.dims(), dim);
    let blocks = size.div_ceil(REDUCE_BLOCK as u64);
    let out_dims = dim.map_or_else(Vec::new, |d| reduced_dims(t.dims(), d, keepdim));
    let mut out = uninit(&out_dims, t.dtype(), ordinal)?;
    if outer * inner == 0 {
        return Ok(out);
    }
    let partial_len = usize::try_from(outer * blocks * inner).unwrap_or(usize::MAX);
    // Every (lane, block) partial sum is written by one thread before it is read.
    let mut partial = CudaStorage::alloc_uninit(ordinal, DType::F64, partial_len)?;
    let stream = partial.stream()?;
    if blocks > 0 {
        let kernel_name = format!("ditto_block_sums_{suffix}");
        let func = kernel(ordinal, &kernel_name)?;
        let cfg = launch_config(ordinal, outer * blocks * inner)?;
        let input = dense_view(&x)?;
        let mut args = stream.launch_builder(&func);
        args.arg(&outer)
            .arg(&size)
            .arg(&inner)
            .arg(&blocks)
            .arg(&input)
            .arg(partial.bytes_mut());
        // SAFETY: matches `ditto_block_sums_<T>(u64 outer, u64 size, u64 inner,
        // u64 blocks, const T* x, double* partial)`; `input` holds outer*size*inner
        // dense elements and `partial` outer*blocks*inner doubles.
        unsafe { args.launch(cfg) }.map_err(launch_failed(ordinal, &kernel_name))?;
    }
    finish_sums(
        suffix,
        (outer, size, inner),
        blocks,
        kind,
        &partial,
        &mut out,
    )?;
    Ok(out)
}

/// Rounds each lane's f64 partial sums (`blocks` per lane, summed in block order) into
/// `out`, divided by the lane length for a mean: the last kernel of both sums, so the
/// blocked and the atomic sum round the same way.
fn finish_sums(
    suffix: &str,
    (outer, size, inner): (u64, u64, u64),
    blocks: u64,
    kind: SumKind,
    partial: &CudaStorage,
    out: &mut Tensor,
) -> Result<()> {
    let ordinal = partial.ordinal();
    let stream = partial.stream()?;
    let kernel_name = format!("ditto_finish_sums_{suffix}");
    let func = kernel(ordinal, &kernel_name)?;
    let cfg = launch_config(ordinal, outer * inner)?;
    let mean = i32::from(kind == SumKind::Mean);
    let dst = output_storage(out)?;
    let mut args = stream.launch_builder(&func);
    args.arg(&outer)
        .arg(&size)
        .arg(&inner)
        .arg(&blocks)
        .arg(&mean)
        .arg(partial.bytes())
        .arg(dst.bytes_mut());
    // SAFETY: matches `ditto_finish_sums_<T>(u64 outer, u64 size, u64 inner, u64 blocks,
    // int mean, const double* partial, T* out)`; `partial` holds outer*blocks*inner
    // doubles and `dst` outer*inner elements.
    unsafe { args.launch(cfg) }.map_err(launch_failed(ordinal, &kernel_name))?;
    Ok(())
}

/// Work items per thread of the one-pass atomic sum: few threads, so few atomics per
/// lane (each thread adds one running sum per lane it touches).
const ATOMIC_SUM_ITEMS_PER_THREAD: u64 = 4096;

/// The one-pass atomic sum or mean along `dim` (`None`: everything): every thread adds
/// its pieces of a lane into the lane's f64 total with `atomicAdd`, then one small
/// kernel rounds the totals (divided by the lane length for a mean). Nondeterministic in
/// the order the pieces arrive.
pub(crate) fn sum_atomic(
    name: &'static str,
    kind: SumKind,
    t: &Tensor,
    dim: Option<usize>,
    keepdim: bool,
) -> Result<Tensor> {
    let suffix = float_suffix(name, t.dtype())?;
    let x = dense(t)?;
    let ordinal = storage_of(&x)?.1;
    let (outer, size, inner) = lanes(t.dims(), dim);
    let out_dims = dim.map_or_else(Vec::new, |d| reduced_dims(t.dims(), d, keepdim));
    let mut out = uninit(&out_dims, t.dtype(), ordinal)?;
    if outer * inner == 0 {
        return Ok(out);
    }
    let lanes_len = usize::try_from(outer * inner).unwrap_or(usize::MAX);
    let mut totals = CudaStorage::alloc(ordinal, DType::F64, lanes_len)?;
    let stream = totals.stream()?;
    let count = outer * size * inner;
    if count > 0 {
        let kernel_name = format!("ditto_sum_atomic_{suffix}");
        let func = kernel(ordinal, &kernel_name)?;
        let cfg = launch_config(ordinal, count.div_ceil(ATOMIC_SUM_ITEMS_PER_THREAD))?;
        let input = dense_view(&x)?;
        let mut args = stream.launch_builder(&func);
        args.arg(&count)
            .arg(&size)
            .arg(&inner)
            .arg(&input)
            .arg(totals.bytes_mut());
        // SAFETY: matches `ditto_sum_atomic_<T>(u64 count, u64 size, u64 inner, const T*
        // x, double* totals)`; `input` holds count dense elements, `totals` (zeroed)
        // outer*inner doubles, and the walk covers every element for any grid.
        unsafe { args.launch(cfg) }.map_err(launch_failed(ordinal, &kernel_name))?;
    }
    // One "block" per lane: the totals are the lanes' whole sums.
    finish_sums(suffix, (outer, size, inner), 1, kind, &totals, &mut out)?;
    Ok(out)
}

/// The maximum of each lane along `dim` and its index (first maximum; first NaN), as
/// `(values, indices)`. The caller checked that the dimension is not empty.
pub(crate) fn max_dim(
    name: &'static str,
    t: &Tensor,
    dim: usize,
    keepdim: bool,
) -> Result<(Tensor, Tensor)> {
    let suffix = float_suffix(name, t.dtype())?;
    let x = dense(t)?;
    let ordinal = storage_of(&x)?.1;
    let (outer, size, inner) = lanes(t.dims(), Some(dim));
    let out_dims = reduced_dims(t.dims(), dim, keepdim);
    let mut values = uninit(&out_dims, t.dtype(), ordinal)?;
    let mut indices = uninit(&out_dims, DType::I64, ordinal)?;
    if outer * inner == 0 {
        return Ok((values, indices));
    }
    let kernel_name = format!("ditto_max_dim_{suffix}");
    let func = kernel(ordinal, &kernel_name)?;
    let cfg = launch_config(ordinal, outer * inner)?;
    let input = dense_view(&x)?;
    let stream = storage_of(&x)?.0.stream()?;
    let value_dst = output_storage(&mut values)?;
    let index_dst = output_storage(&mut indices)?;
    let mut args = stream.launch_builder(&func);
    args.arg(&outer)
        .arg(&size)
        .arg(&inner)
        .arg(&input)
        .arg(value_dst.bytes_mut())
        .arg(index_dst.bytes_mut());
    // SAFETY: matches `ditto_max_dim_<T>(u64 outer, u64 size, u64 inner, const T* x,
    // T* values, i64* indices)`; size >= 1 (checked by the caller), `input` holds
    // outer*size*inner dense elements, both outputs outer*inner.
    unsafe { args.launch(cfg) }.map_err(launch_failed(ordinal, &kernel_name))?;
    Ok((values, indices))
}

/// `log_softmax` along `dim`, in the steps documented on [`Tensor::log_softmax`].
pub(crate) fn log_softmax(t: &Tensor, dim: usize) -> Result<Tensor> {
    const OP: &str = "log_softmax";
    let suffix = float_suffix(OP, t.dtype())?;
    let x = dense(t)?;
    let ordinal = storage_of(&x)?.1;
    let (outer, size, inner) = lanes(t.dims(), Some(dim));
    let mut out = uninit(t.dims(), t.dtype(), ordinal)?;
    if outer * size * inner == 0 {
        return Ok(out);
    }
    // Portable arithmetic (docs/contract.md §14): ditto's own exp / log in the lane.
    let portable = if crate::are_portable_arithmetic_enabled() {
        "portable_"
    } else {
        ""
    };
    let kernel_name = format!("ditto_log_softmax_{portable}{suffix}");
    let func = kernel(ordinal, &kernel_name)?;
    let cfg = launch_config(ordinal, outer * inner)?;
    let input = dense_view(&x)?;
    let dst = output_storage(&mut out)?;
    let stream = dst.stream()?;
    let mut args = stream.launch_builder(&func);
    args.arg(&outer)
        .arg(&size)
        .arg(&inner)
        .arg(&input)
        .arg(dst.bytes_mut());
    // SAFETY: matches `ditto_log_softmax_<T>(u64 outer, u64 size, u64 inner, const T* x,
    // T* out)`; size >= 1 here and both buffers hold outer*size*inner dense elements.
    unsafe { args.launch(cfg) }.map_err(launch_failed(ordinal, &kernel_name))?;
    Ok(out)
}
