//! Reductions along one dimension on the device: sums and means (in the CPU's blocked
//! order, so bit-identical to it), maxima with their indices, and `log_softmax`.
//!
//! A tensor is seen as `(outer, size, inner)` around the reduced dimension; a lane is one
//! `(outer, inner)` pair, and each lane belongs to one thread.

use cudarc::driver::PushKernelArg;

use super::elementwise::float_suffix;
use super::storage_of;
use super::{dense, dense_view, output_storage, uninit, TensorKernel};
use crate::cuda::CudaStorage;
use crate::determinism::Chosen;
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

/// A reduction's input seen as lanes around the reduced dimension (see the module
/// docs), with what every reduction kernel here needs first: the dtype's kernel suffix,
/// the dense input and its device.
struct LaneInput {
    suffix: &'static str,
    x: Tensor,
    ordinal: usize,
    outer: u64,
    size: u64,
    inner: u64,
}

impl LaneInput {
    /// `t` as lanes along `dim` (`None`: all of `t` as one lane), for the op `name`.
    fn of(name: &'static str, t: &Tensor, dim: Option<usize>) -> Result<Self> {
        let suffix = float_suffix(name, t.dtype())?;
        let x = dense(t)?;
        let ordinal = storage_of(&x)?.1;
        let (outer, size, inner) = lanes(t.dims(), dim);
        Ok(LaneInput {
            suffix,
            x,
            ordinal,
            outer,
            size,
            inner,
        })
    }
}

/// Sum or mean along `dim` (`None`: of every element, as a rank-0 tensor). The caller
/// checked that `dim` is in range. Each lane's f64 partial sums come in one of two
/// orders, then one small kernel ([`finish_sums`]) rounds them the same way for both:
/// - `Deterministic`: the CPU's blocked order (one partial per `REDUCE_BLOCK` elements,
///   summed in block order), so bit-identical to the CPU;
/// - `Fast`: the one-pass atomic sum (every thread adds its pieces of a lane into the
///   lane's f64 total with `atomicAdd`), nondeterministic in the order pieces arrive.
pub(crate) fn sum_dim(
    name: &'static str,
    kind: SumKind,
    t: &Tensor,
    dim: Option<usize>,
    keepdim: bool,
    order: Chosen,
) -> Result<Tensor> {
    let input = LaneInput::of(name, t, dim)?;
    let out_dims = dim.map_or_else(Vec::new, |d| reduced_dims(t.dims(), d, keepdim));
    let mut out = uninit(&out_dims, t.dtype(), input.ordinal)?;
    if input.outer * input.inner == 0 {
        return Ok(out);
    }
    let (partial, blocks) = match order {
        Chosen::Deterministic => block_sums(&input)?,
        // One "block" per lane: the totals are the lanes' whole sums.
        Chosen::Fast => (atomic_totals(&input)?, 1),
    };
    let lanes = (input.outer, input.size, input.inner);
    finish_sums(input.suffix, lanes, blocks, kind, &partial, &mut out)?;
    Ok(out)
}

/// Each lane's partial sums in the CPU's blocked order, and the blocks per lane.
fn block_sums(input: &LaneInput) -> Result<(CudaStorage, u64)> {
    let LaneInput {
        outer, size, inner, ..
    } = *input;
    let blocks = size.div_ceil(REDUCE_BLOCK as u64);
    let partial_len = usize::try_from(outer * blocks * inner).unwrap_or(usize::MAX);
    // Every (lane, block) partial sum is written by one thread before it is read.
    let mut partial = CudaStorage::alloc_uninit(input.ordinal, DType::F64, partial_len)?;
    if blocks > 0 {
        let stream = partial.stream()?;
        let kernel_name = format!("ditto_block_sums_{}", input.suffix);
        let kernel = TensorKernel::new(input.ordinal, kernel_name, outer * blocks * inner)?;
        let x = dense_view(&input.x)?;
        let mut args = kernel.args(&stream);
        args.arg(&outer)
            .arg(&size)
            .arg(&inner)
            .arg(&blocks)
            .arg(&x)
            .arg(partial.bytes_mut());
        // SAFETY: matches `ditto_block_sums_<T>(u64 outer, u64 size, u64 inner,
        // u64 blocks, const T* x, double* partial)`; `x` holds outer*size*inner
        // dense elements and `partial` outer*blocks*inner doubles.
        unsafe { kernel.launch(args) }?;
    }
    Ok((partial, blocks))
}

/// Work items per thread of the one-pass atomic sum: few threads, so few atomics per
/// lane (each thread adds one running sum per lane it touches).
const ATOMIC_SUM_ITEMS_PER_THREAD: u64 = 4096;

/// Each lane's whole sum, added up by `atomicAdd` in arrival order.
fn atomic_totals(input: &LaneInput) -> Result<CudaStorage> {
    let LaneInput {
        outer, size, inner, ..
    } = *input;
    let lanes_len = usize::try_from(outer * inner).unwrap_or(usize::MAX);
    let mut totals = CudaStorage::alloc(input.ordinal, DType::F64, lanes_len)?;
    let count = outer * size * inner;
    if count > 0 {
        let stream = totals.stream()?;
        let kernel_name = format!("ditto_sum_atomic_{}", input.suffix);
        let threads = count.div_ceil(ATOMIC_SUM_ITEMS_PER_THREAD);
        let kernel = TensorKernel::new(input.ordinal, kernel_name, threads)?;
        let x = dense_view(&input.x)?;
        let mut args = kernel.args(&stream);
        args.arg(&count)
            .arg(&size)
            .arg(&inner)
            .arg(&x)
            .arg(totals.bytes_mut());
        // SAFETY: matches `ditto_sum_atomic_<T>(u64 count, u64 size, u64 inner, const T*
        // x, double* totals)`; `x` holds count dense elements, `totals` (zeroed)
        // outer*inner doubles, and the walk covers every element for any grid.
        unsafe { kernel.launch(args) }?;
    }
    Ok(totals)
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
    let kernel = TensorKernel::new(ordinal, kernel_name, outer * inner)?;
    let mean = i32::from(kind == SumKind::Mean);
    let dst = output_storage(out)?;
    let mut args = kernel.args(&stream);
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
    unsafe { kernel.launch(args) }?;
    Ok(())
}

/// The maximum of each lane along `dim` and its index (first maximum; first NaN), as
/// `(values, indices)`. The caller checked that the dimension is not empty.
pub(crate) fn max_dim(
    name: &'static str,
    t: &Tensor,
    dim: usize,
    keepdim: bool,
) -> Result<(Tensor, Tensor)> {
    let LaneInput {
        suffix,
        ref x,
        ordinal,
        outer,
        size,
        inner,
    } = LaneInput::of(name, t, Some(dim))?;
    let out_dims = reduced_dims(t.dims(), dim, keepdim);
    let mut values = uninit(&out_dims, t.dtype(), ordinal)?;
    let mut indices = uninit(&out_dims, DType::I64, ordinal)?;
    if outer * inner == 0 {
        return Ok((values, indices));
    }
    let kernel_name = format!("ditto_max_dim_{suffix}");
    let kernel = TensorKernel::new(ordinal, kernel_name, outer * inner)?;
    let input = dense_view(x)?;
    let stream = storage_of(x)?.0.stream()?;
    let value_dst = output_storage(&mut values)?;
    let index_dst = output_storage(&mut indices)?;
    let mut args = kernel.args(&stream);
    args.arg(&outer)
        .arg(&size)
        .arg(&inner)
        .arg(&input)
        .arg(value_dst.bytes_mut())
        .arg(index_dst.bytes_mut());
    // SAFETY: matches `ditto_max_dim_<T>(u64 outer, u64 size, u64 inner, const T* x,
    // T* values, i64* indices)`; size >= 1 (checked by the caller), `input` holds
    // outer*size*inner dense elements, both outputs outer*inner.
    unsafe { kernel.launch(args) }?;
    Ok((values, indices))
}

/// `log_softmax` along `dim`, in the steps documented on [`Tensor::log_softmax`].
pub(crate) fn log_softmax(t: &Tensor, dim: usize) -> Result<Tensor> {
    let LaneInput {
        suffix,
        ref x,
        ordinal,
        outer,
        size,
        inner,
    } = LaneInput::of("log_softmax", t, Some(dim))?;
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
    let kernel = TensorKernel::new(ordinal, kernel_name, outer * inner)?;
    let input = dense_view(x)?;
    let dst = output_storage(&mut out)?;
    let stream = dst.stream()?;
    let mut args = kernel.args(&stream);
    args.arg(&outer)
        .arg(&size)
        .arg(&inner)
        .arg(&input)
        .arg(dst.bytes_mut());
    // SAFETY: matches `ditto_log_softmax_<T>(u64 outer, u64 size, u64 inner, const T* x,
    // T* out)`; size >= 1 here and both buffers hold outer*size*inner dense elements.
    unsafe { kernel.launch(args) }?;
    Ok(out)
}
