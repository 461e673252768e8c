//! The accumulation kernels' bodies (`index_add`, `scatter_add`, the one-pass sum) run
//! on the host, with the arguments the CUDA launchers build: the same checks, the same
//! host-sorted positions.
//!
//! On the host work items run one at a time, so the atomic bodies give one particular
//! arrival order (item order); the owner bodies can be run backwards to show that their
//! result does not depend on the order of work items at all.

use tensor_core::ops::accumulate::index_add::{check_index_add, check_scatter_add};
use tensor_core::ops::accumulate::{rows_by_target, scatter_by_target};
use tensor_core::ops::kernel_layout::lanes;
use tensor_core::ops::reduce::reduced_dims;
use tensor_core::ops::Float;
use tensor_core::{Element, Result, Tensor};

mod ffi {
    macro_rules! host_accumulate {
        ($t:ty, $ia_atomic:ident, $ia_owner:ident, $sa_atomic:ident, $sa_owner:ident, $sum:ident) => {
            extern "C" {
                pub fn $ia_atomic(
                    outer: u64,
                    size: u64,
                    inner: u64,
                    n: u64,
                    alpha: $t,
                    index: *const i64,
                    src: *const $t,
                    out: *mut $t,
                );
                pub fn $ia_owner(
                    outer: u64,
                    size: u64,
                    inner: u64,
                    n: u64,
                    alpha: $t,
                    starts: *const u64,
                    positions: *const u64,
                    src: *const $t,
                    out: *mut $t,
                    reverse: i32,
                );
                pub fn $sa_atomic(
                    count: u64,
                    n: u64,
                    index_step: u64,
                    dst_step: u64,
                    src_step: u64,
                    bases: *const u64,
                    index: *const i64,
                    src: *const $t,
                    out: *mut $t,
                );
                pub fn $sa_owner(
                    targets_len: u64,
                    targets: *const u64,
                    starts: *const u64,
                    sources: *const u64,
                    src: *const $t,
                    out: *mut $t,
                    reverse: i32,
                );
                pub fn $sum(
                    outer: u64,
                    size: u64,
                    inner: u64,
                    threads: u64,
                    mean: i32,
                    x: *const $t,
                    out: *mut $t,
                );
            }
        };
    }
    host_accumulate!(
        f32,
        ditto_host_index_add_atomic_f32,
        ditto_host_index_add_owner_f32,
        ditto_host_scatter_add_atomic_f32,
        ditto_host_scatter_add_owner_f32,
        ditto_host_sum_atomic_f32
    );
    host_accumulate!(
        f64,
        ditto_host_index_add_atomic_f64,
        ditto_host_index_add_owner_f64,
        ditto_host_scatter_add_atomic_f64,
        ditto_host_scatter_add_owner_f64,
        ditto_host_sum_atomic_f64
    );
}

type IndexAddAtomic<T> = unsafe extern "C" fn(u64, u64, u64, u64, T, *const i64, *const T, *mut T);
type IndexAddOwner<T> =
    unsafe extern "C" fn(u64, u64, u64, u64, T, *const u64, *const u64, *const T, *mut T, i32);
type ScatterAtomic<T> =
    unsafe extern "C" fn(u64, u64, u64, u64, u64, *const u64, *const i64, *const T, *mut T);
type ScatterOwner<T> =
    unsafe extern "C" fn(u64, *const u64, *const u64, *const u64, *const T, *mut T, i32);
type SumAtomic<T> = unsafe extern "C" fn(u64, u64, u64, u64, i32, *const T, *mut T);

/// The C entry points for one float type.
trait HostAccumulate: Float {
    const INDEX_ADD_ATOMIC: IndexAddAtomic<Self>;
    const INDEX_ADD_OWNER: IndexAddOwner<Self>;
    const SCATTER_ATOMIC: ScatterAtomic<Self>;
    const SCATTER_OWNER: ScatterOwner<Self>;
    const SUM_ATOMIC: SumAtomic<Self>;
}

impl HostAccumulate for f32 {
    const INDEX_ADD_ATOMIC: IndexAddAtomic<f32> = ffi::ditto_host_index_add_atomic_f32;
    const INDEX_ADD_OWNER: IndexAddOwner<f32> = ffi::ditto_host_index_add_owner_f32;
    const SCATTER_ATOMIC: ScatterAtomic<f32> = ffi::ditto_host_scatter_add_atomic_f32;
    const SCATTER_OWNER: ScatterOwner<f32> = ffi::ditto_host_scatter_add_owner_f32;
    const SUM_ATOMIC: SumAtomic<f32> = ffi::ditto_host_sum_atomic_f32;
}

impl HostAccumulate for f64 {
    const INDEX_ADD_ATOMIC: IndexAddAtomic<f64> = ffi::ditto_host_index_add_atomic_f64;
    const INDEX_ADD_OWNER: IndexAddOwner<f64> = ffi::ditto_host_index_add_owner_f64;
    const SCATTER_ATOMIC: ScatterAtomic<f64> = ffi::ditto_host_scatter_add_atomic_f64;
    const SCATTER_OWNER: ScatterOwner<f64> = ffi::ditto_host_scatter_add_owner_f64;
    const SUM_ATOMIC: SumAtomic<f64> = ffi::ditto_host_sum_atomic_f64;
}

/// Which kernel body to run, and for the owner bodies in which order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// The `atomicAdd` fast path, items in order.
    Atomic,
    /// The owner-computes deterministic path, items in order.
    Owner,
    /// The owner-computes path, items in reverse order.
    OwnerReversed,
}

fn u64s(values: &[usize]) -> Vec<u64> {
    values.iter().map(|&v| v as u64).collect()
}

/// `ditto_index_add_*_item` over every work item: `this.index_add(dim, index, source,
/// alpha)` as the GPU computes it.
pub fn index_add(
    this: &Tensor,
    dim: usize,
    index: &Tensor,
    source: &Tensor,
    alpha: f64,
    body: Body,
) -> Result<Tensor> {
    let args = check_index_add("host_parity index_add", this, dim, index, source)?;
    with_float_dtype!(this.dtype(), "host_parity", T => {
        let mut out = this.to_vec::<T>()?;
        let src = source.to_vec::<T>()?;
        let s = args.shape;
        let (outer, size, inner, n) = (s.outer as u64, s.size as u64, s.inner as u64, s.n as u64);
        let alpha = T::from_f64(alpha);
        if body == Body::Atomic {
            let idx: Vec<i64> = args.index.iter().map(|&v| v as i64).collect();
            // SAFETY: `idx` holds n values < size, `src` outer*n*inner elements, `out`
            // outer*size*inner.
            unsafe { T::INDEX_ADD_ATOMIC(outer, size, inner, n, alpha, idx.as_ptr(), src.as_ptr(), out.as_mut_ptr()) };
        } else {
            let (starts, positions) = rows_by_target(&args.index, s.size);
            let (starts, positions) = (u64s(&starts), u64s(&positions));
            let reverse = i32::from(body == Body::OwnerReversed);
            // SAFETY: `starts` has size + 1 offsets into the n `positions` (< n); the
            // buffers as above.
            unsafe {
                T::INDEX_ADD_OWNER(outer, size, inner, n, alpha, starts.as_ptr(), positions.as_ptr(), src.as_ptr(), out.as_mut_ptr(), reverse)
            };
        }
        Tensor::from_cpu_storage(T::into_storage(out), this.dims())
    })
}

/// `ditto_scatter_add_*_item` over every work item: `this.scatter_add(dim, index, src)`
/// as the GPU computes it.
pub fn scatter_add(
    this: &Tensor,
    dim: usize,
    index: &Tensor,
    src: &Tensor,
    body: Body,
) -> Result<Tensor> {
    let args = check_scatter_add("host_parity scatter_add", this, dim, index, src)?;
    with_float_dtype!(this.dtype(), "host_parity", T => {
        let mut out = this.to_vec::<T>()?;
        let values = src.to_vec::<T>()?;
        let lanes = &args.lanes;
        if body == Body::Atomic {
            let bases: Vec<u64> = lanes.bases.iter().flat_map(|&(d, s)| [d as u64, s as u64]).collect();
            let idx: Vec<i64> = args.index.iter().map(|&v| v as i64).collect();
            // SAFETY: the bases and the checked index form positions inside the dense
            // `out` and `values` (check_scatter_add derived them from the dims).
            unsafe {
                T::SCATTER_ATOMIC(idx.len() as u64, lanes.n as u64, lanes.index_step as u64, lanes.dst_step as u64,
                    lanes.src_step as u64, bases.as_ptr(), idx.as_ptr(), values.as_ptr(), out.as_mut_ptr())
            };
        } else {
            let (targets, starts, sources) = scatter_by_target(&args.index, lanes);
            let (targets, starts, sources) = (u64s(&targets), u64s(&starts), u64s(&sources));
            let reverse = i32::from(body == Body::OwnerReversed);
            // SAFETY: positions formed as above; `starts` has one more entry than targets.
            unsafe {
                T::SCATTER_OWNER(targets.len() as u64, targets.as_ptr(), starts.as_ptr(), sources.as_ptr(),
                    values.as_ptr(), out.as_mut_ptr(), reverse)
            };
        }
        Tensor::from_cpu_storage(T::into_storage(out), this.dims())
    })
}

/// `ditto_sum_atomic_walk` for `threads` work items, then `ditto_finish_sum`: the fast
/// sum (or mean) along `dim` (`None`: everything) as a grid of `threads` threads would
/// compute it with the threads run one after another.
pub fn sum_atomic(x: &Tensor, dim: Option<usize>, mean: bool, threads: u64) -> Result<Tensor> {
    if let Some(d) = dim {
        x.check_dim("host_parity", d)?;
    }
    let (outer, size, inner) = lanes(x.dims(), dim);
    let dims = dim.map_or_else(Vec::new, |d| reduced_dims(x.dims(), d, false));
    with_float_dtype!(x.dtype(), "host_parity", T => {
        let values = x.to_vec::<T>()?;
        let mut out = vec![T::default(); (outer * inner) as usize];
        // SAFETY: `values` holds outer*size*inner dense elements, `out` outer*inner.
        unsafe { T::SUM_ATOMIC(outer, size, inner, threads.max(1), i32::from(mean), values.as_ptr(), out.as_mut_ptr()) };
        Tensor::from_cpu_storage(T::into_storage(out), &dims)
    })
}
