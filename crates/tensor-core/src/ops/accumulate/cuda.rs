//! `index_add` and `scatter_add` on the device: the `atomicAdd` fast paths and the
//! owner-computes deterministic paths (`ditto_*_atomic_*` / `ditto_*_owner_*` in
//! `cuda/tensor_ops.cu`).
//!
//! The index was already copied to the host and checked (every value in range), so the
//! kernels never see a bad index. The deterministic paths sort the contributions by
//! target on the host (the same counting sort the CPU uses), upload the positions, and
//! give each target to one work item, which adds in index order: bit-identical to the
//! CPU's deterministic path, for every launch configuration.

use cudarc::driver::{CudaView, DeviceRepr, PushKernelArg};

use crate::determinism::Chosen;
use crate::ops::accumulate::{rows_by_target, scatter_by_target};
use crate::ops::accumulate::{IndexAddShape, ScatterArgs};
use crate::ops::cuda::{contiguous, dense, dense_view, TensorKernel};
use crate::ops::cuda::{output_storage, storage_of, upload_u64};
use crate::ops::elementwise::cuda::float_suffix;
use crate::ops::Float;
use crate::{CheckedIndex, Element, Result, Tensor};

/// Where an `index_add` on the device gets its checked indices.
pub(crate) enum IndexSource<'a> {
    /// An index tensor on the device and its values, checked on the host: the
    /// deterministic path sorts them there and uploads the sort.
    Tensor(&'a Tensor, &'a [usize]),
    /// Indices checked and placed with their sort before ([`CheckedIndex`]): nothing
    /// to copy either way.
    Checked(&'a CheckedIndex),
}

/// What an `index_add` on the device adds into.
pub(crate) enum Start<'a> {
    /// A tensor (its dense copy receives the sums).
    Tensor(&'a Tensor),
    /// Zeros of these dims, like `source`'s dtype and device. The deterministic kernel
    /// starts each sum from +0.0 itself, so nothing writes the zeros first.
    Zeros(&'a [usize]),
}

/// `this` with `alpha * source` added at the checked indices along the dim.
pub(crate) fn index_add(
    this: Start<'_>,
    index: IndexSource<'_>,
    source: &Tensor,
    shape: IndexAddShape,
    alpha: f64,
    chosen: Chosen,
) -> Result<Tensor> {
    match float_suffix("index_add", source.dtype())? {
        "f32" => index_add_typed(this, index, source, shape, f32::from_f64(alpha), chosen),
        _ => index_add_typed(this, index, source, shape, alpha, chosen),
    }
}

fn index_add_typed<T: Float + DeviceRepr>(
    this: Start<'_>,
    index: IndexSource<'_>,
    source: &Tensor,
    shape: IndexAddShape,
    alpha: T,
    chosen: Chosen,
) -> Result<Tensor> {
    let suffix = float_suffix("index_add", source.dtype())?;
    let ordinal = storage_of(source)?.1;
    let fresh = matches!((&this, chosen), (Start::Zeros(_), Chosen::Deterministic));
    let mut out = match this {
        Start::Tensor(this) => contiguous(this)?,
        Start::Zeros(dims) if fresh => crate::ops::cuda::uninit(dims, source.dtype(), ordinal)?,
        Start::Zeros(dims) => crate::ops::cuda::empty(dims, source.dtype(), ordinal)?,
    };
    let (outer, size, inner, n) = (
        shape.outer as u64,
        shape.size as u64,
        shape.inner as u64,
        shape.n as u64,
    );
    if outer * n * inner == 0 {
        return Ok(out);
    }
    let src = dense(source)?;
    let src_view = dense_view(&src)?;
    // Both kernels take the same arguments but for how they read the index: the atomic
    // one the index itself (a work item per source element), the owner one the source
    // rows sorted by target on the host (a work item per target element).
    let given; // the dense index, alive as long as its view
    let sorted; // the sort (uploaded or placed), alive as long as the launch
    let (rows, path, items) = match (chosen, index) {
        (Chosen::Fast, IndexSource::Tensor(index, _)) => {
            given = dense(index)?;
            (
                IndexRows::AsGiven(dense_view(&given)?),
                "atomic",
                outer * n * inner,
            )
        }
        (Chosen::Fast, IndexSource::Checked(index)) => {
            let [words, _, _] = index.device_parts()?;
            given = words;
            (
                IndexRows::AsGiven(dense_view(&given)?),
                "atomic",
                outer * n * inner,
            )
        }
        (Chosen::Deterministic, source) => {
            sorted = match source {
                IndexSource::Tensor(_, values) => {
                    let (starts, positions) = rows_by_target(values, shape.size);
                    let upload = |v: &[usize]| -> Result<Tensor> {
                        Tensor::from_storage(
                            crate::Storage::Cuda(upload_u64(ordinal, v)?),
                            &[v.len()],
                        )
                    };
                    (upload(&starts)?, upload(&positions)?)
                }
                IndexSource::Checked(index) => {
                    let [_, starts, positions] = index.device_parts()?;
                    (starts, positions)
                }
            };
            let rows = IndexRows::ByTarget {
                starts: dense_view(&sorted.0)?,
                positions: dense_view(&sorted.1)?,
            };
            (rows, "owner", outer * size * inner)
        }
    };
    let kernel = TensorKernel::new(ordinal, format!("ditto_index_add_{path}_{suffix}"), items)?;
    let dst = output_storage(&mut out)?;
    let stream = dst.stream()?;
    let mut launch = kernel.args(&stream);
    launch
        .arg(&outer)
        .arg(&size)
        .arg(&inner)
        .arg(&n)
        .arg(&alpha);
    match &rows {
        IndexRows::AsGiven(index) => launch.arg(index),
        IndexRows::ByTarget { starts, positions } => launch.arg(starts).arg(positions),
    };
    launch.arg(&src_view).arg(dst.bytes_mut());
    let fresh = i32::from(fresh);
    if let IndexRows::ByTarget { .. } = rows {
        launch.arg(&fresh);
    }
    // SAFETY: matches `ditto_index_add_atomic_<T>(u64 outer, u64 size, u64 inner, u64 n,
    // T alpha, const i64* index, const T* src, T* out)`, where `index` holds n values in
    // 0..size (checked on the host), or `ditto_index_add_owner_<T>(u64 outer, u64 size,
    // u64 inner, u64 n, T alpha, const u64* starts, const u64* positions, const T* src,
    // T* out, int fresh)`, where `starts` has size + 1 ascending offsets into
    // `positions`, whose n values are < n; `src` holds outer*n*inner dense elements,
    // `out` (a fresh dense copy, or with `fresh` a buffer the kernel writes whole)
    // outer*size*inner.
    unsafe { kernel.launch(launch) }?;
    Ok(out)
}

/// How an `index_add` kernel reads the index: as given (the atomic fast path), or as the
/// source rows sorted by target (the owner-computes path; `starts` are offsets into
/// `positions`, the CPU's counting sort).
enum IndexRows<'a> {
    AsGiven(CudaView<'a, u8>),
    ByTarget {
        starts: CudaView<'a, u8>,
        positions: CudaView<'a, u8>,
    },
}

/// `this` with `src` scattered into it at the checked `args`.
pub(crate) fn scatter_add(
    this: &Tensor,
    index: &Tensor,
    src: &Tensor,
    args: &ScatterArgs,
    chosen: Chosen,
) -> Result<Tensor> {
    let suffix = float_suffix("scatter_add", this.dtype())?;
    let mut out = contiguous(this)?;
    let ordinal = storage_of(&out)?.1;
    let count = args.index.len() as u64;
    if count == 0 {
        return Ok(out);
    }
    let values = dense(src)?;
    let src_view = dense_view(&values)?;
    let lanes = &args.lanes;
    match chosen {
        Chosen::Fast => {
            let flat: Vec<usize> = lanes.bases.iter().flat_map(|&(d, s)| [d, s]).collect();
            let bases = upload_u64(ordinal, &flat)?;
            let index = dense(index)?;
            let index_view = dense_view(&index)?;
            let (n, index_step) = (lanes.n as u64, lanes.index_step as u64);
            let (dst_step, src_step) = (lanes.dst_step as u64, lanes.src_step as u64);
            let kernel_name = format!("ditto_scatter_add_atomic_{suffix}");
            let kernel = TensorKernel::new(ordinal, kernel_name, count)?;
            let dst = output_storage(&mut out)?;
            let stream = dst.stream()?;
            let mut launch = kernel.args(&stream);
            launch
                .arg(&count)
                .arg(&n)
                .arg(&index_step)
                .arg(&dst_step)
                .arg(&src_step)
                .arg(bases.bytes())
                .arg(&index_view)
                .arg(&src_view)
                .arg(dst.bytes_mut());
            // SAFETY: matches `ditto_scatter_add_atomic_<T>(u64 count, u64 n, u64
            // index_step, u64 dst_step, u64 src_step, const u64* bases, const i64* index,
            // const T* src, T* out)`; `bases` holds two offsets per lane, and every
            // target and source they form with the checked index lies inside the dense
            // `out` and `src` (check_scatter_add derived them from their dims).
            unsafe { kernel.launch(launch) }?;
        }
        Chosen::Deterministic => {
            let (targets, starts, sources) = scatter_by_target(&args.index, lanes);
            let targets_len = targets.len() as u64;
            let targets = upload_u64(ordinal, &targets)?;
            let starts = upload_u64(ordinal, &starts)?;
            let sources = upload_u64(ordinal, &sources)?;
            let kernel_name = format!("ditto_scatter_add_owner_{suffix}");
            let kernel = TensorKernel::new(ordinal, kernel_name, targets_len)?;
            let dst = output_storage(&mut out)?;
            let stream = dst.stream()?;
            let mut launch = kernel.args(&stream);
            launch
                .arg(&targets_len)
                .arg(targets.bytes())
                .arg(starts.bytes())
                .arg(sources.bytes())
                .arg(&src_view)
                .arg(dst.bytes_mut());
            // SAFETY: matches `ditto_scatter_add_owner_<T>(u64 targets_len, const u64*
            // targets, const u64* starts, const u64* sources, const T* src, T* out)`;
            // the positions were formed from the checked index and the dense dims.
            unsafe { kernel.launch(launch) }?;
        }
    }
    Ok(out)
}
