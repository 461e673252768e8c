//! Reductions along one dimension on the device: sums and means (in the CPU's blocked
//! order, so bit-identical to it), maxima with their indices, and `log_softmax`.
//!
//! A tensor is seen as `(outer, size, inner)` around the reduced dimension; a lane is one
//! `(outer, inner)` pair, and each lane belongs to one thread.

use cudarc::driver::{CudaStream, LaunchArgs, PushKernelArg};

use crate::cuda::CudaStorage;
use crate::determinism::Chosen;
use crate::ops::cuda::storage_of;
use crate::ops::cuda::{dense, dense_view, output_storage, uninit, TensorKernel};
use crate::ops::elementwise::cuda::float_suffix;
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
/// the dense input and its device. Every lane kernel takes the lane shape
/// `(outer, size, inner)` as its first three parameters, so this type names the kernel
/// and begins its argument list, and each launch below states only what is its own.
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

    /// The kernel `ditto_<stem>_<dtype suffix>` on the input's device, over `items`
    /// threads.
    fn kernel(&self, stem: &str, items: u64) -> Result<TensorKernel> {
        TensorKernel::new(self.ordinal, format!("ditto_{stem}_{}", self.suffix), items)
    }

    /// `kernel`'s argument list on `stream`, begun with the lane shape.
    fn lane_args<'a>(&'a self, kernel: &'a TensorKernel, stream: &'a CudaStream) -> LaunchArgs<'a> {
        let mut args = kernel.args(stream);
        args.arg(&self.outer).arg(&self.size).arg(&self.inner);
        args
    }

    /// The number of lanes, `outer * inner`: the length of a reduced output.
    fn lane_count(&self) -> u64 {
        self.outer * self.inner
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
    if input.lane_count() == 0 {
        return Ok(out);
    }
    let (partial, blocks) = match order {
        Chosen::Deterministic => block_sums(&input)?,
        // One "block" per lane: the totals are the lanes' whole sums.
        Chosen::Fast => (atomic_totals(&input)?, 1),
    };
    finish_sums(&input, blocks, kind, &partial, &mut out)?;
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
        let kernel = input.kernel("block_sums", outer * blocks * inner)?;
        let x = dense_view(&input.x)?;
        let mut args = input.lane_args(&kernel, &stream);
        args.arg(&blocks).arg(&x).arg(partial.bytes_mut());
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
    let lanes_len = usize::try_from(input.lane_count()).unwrap_or(usize::MAX);
    let mut totals = CudaStorage::alloc(input.ordinal, DType::F64, lanes_len)?;
    let count = input.lane_count() * input.size;
    if count > 0 {
        let stream = totals.stream()?;
        let threads = count.div_ceil(ATOMIC_SUM_ITEMS_PER_THREAD);
        let kernel = input.kernel("sum_atomic", threads)?;
        let x = dense_view(&input.x)?;
        // Its first parameter is the element count, not `outer`: the threads walk the
        // elements, not the lanes.
        let mut args = kernel.args(&stream);
        args.arg(&count)
            .arg(&input.size)
            .arg(&input.inner)
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
    input: &LaneInput,
    blocks: u64,
    kind: SumKind,
    partial: &CudaStorage,
    out: &mut Tensor,
) -> Result<()> {
    let stream = partial.stream()?;
    let kernel = input.kernel("finish_sums", input.lane_count())?;
    let mean = i32::from(kind == SumKind::Mean);
    let dst = output_storage(out)?;
    let mut args = input.lane_args(&kernel, &stream);
    args.arg(&blocks)
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
    let input = LaneInput::of(name, t, Some(dim))?;
    let out_dims = reduced_dims(t.dims(), dim, keepdim);
    let mut values = uninit(&out_dims, t.dtype(), input.ordinal)?;
    let mut indices = uninit(&out_dims, DType::I64, input.ordinal)?;
    if input.lane_count() == 0 {
        return Ok((values, indices));
    }
    let kernel = input.kernel("max_dim", input.lane_count())?;
    let x = dense_view(&input.x)?;
    let stream = storage_of(&input.x)?.0.stream()?;
    let value_dst = output_storage(&mut values)?;
    let index_dst = output_storage(&mut indices)?;
    let mut args = input.lane_args(&kernel, &stream);
    args.arg(&x)
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
    let input = LaneInput::of("log_softmax", t, Some(dim))?;
    let mut out = uninit(t.dims(), t.dtype(), input.ordinal)?;
    if input.lane_count() * input.size == 0 {
        return Ok(out);
    }
    // Portable arithmetic (docs/contract.md §14): ditto's own exp / log in the lane.
    let stem = if crate::are_portable_arithmetic_enabled() {
        "log_softmax_portable"
    } else {
        "log_softmax"
    };
    let kernel = input.kernel(stem, input.lane_count())?;
    let x = dense_view(&input.x)?;
    let dst = output_storage(&mut out)?;
    let stream = dst.stream()?;
    let mut args = input.lane_args(&kernel, &stream);
    args.arg(&x).arg(dst.bytes_mut());
    // SAFETY: matches `ditto_log_softmax_<T>(u64 outer, u64 size, u64 inner, const T* x,
    // T* out)`; size >= 1 here and both buffers hold outer*size*inner dense elements.
    unsafe { kernel.launch(args) }?;
    Ok(out)
}
