//! The CPU bodies of `index_add` and `scatter_add`: how contributions are added into
//! shared targets, deterministically or in arrival order.
//!
//! Every path adds the same terms with the same operations (`acc + alpha * x`, a
//! multiply then an add, as `axpy_` does); they differ only in the *order* in which the
//! contributions to one target element are added, which is what changes float bits:
//!
//! * **serial** (one thread, or little work): contributions in index order;
//! * **deterministic** (owner computes): each target is owned by one thread, which adds
//!   its contributions in index order, so the bits equal the serial loop's for every
//!   thread count;
//! * **fast** (arrival order): threads split the contributions and add them into shared
//!   targets under a lock (rows) or with a compare-and-swap (elements), in whatever order
//!   they get there. Not reproducible with more than one thread.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use rayon::prelude::*;

use super::Float;

/// Below this many source elements the parallel paths are not worth starting (the same
/// threshold as the elementwise ops); only speed depends on it, never values.
pub(crate) const PAR_MIN_WORK: usize = super::PAR_MIN_LEN;

/// Source rows handed to a thread at a time by the fast `index_add`: small, so the two
/// halves of a 2-thread run interleave on the shared rows.
const FAST_CHUNK_ROWS: usize = 16;

/// A float type whose values can be added atomically (a compare-and-swap loop on bits).
pub(crate) trait AtomicAdd: Float {
    /// `*target += value` as one atomic read-modify-write.
    ///
    /// # Safety
    /// `target` must be valid, aligned, and only accessed atomically while others may
    /// touch it.
    unsafe fn atomic_add(target: *mut Self, value: Self);
}

impl AtomicAdd for f32 {
    unsafe fn atomic_add(target: *mut f32, value: f32) {
        // SAFETY: the caller's contract; f32 and AtomicU32 share size and alignment.
        let cell = unsafe { AtomicU32::from_ptr(target.cast()) };
        let _ = cell.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            Some((f32::from_bits(bits) + value).to_bits())
        });
    }
}

impl AtomicAdd for f64 {
    unsafe fn atomic_add(target: *mut f64, value: f64) {
        // SAFETY: the caller's contract; f64 and AtomicU64 share size and alignment.
        let cell = unsafe { AtomicU64::from_ptr(target.cast()) };
        let _ = cell.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            Some((f64::from_bits(bits) + value).to_bits())
        });
    }
}

/// A destination buffer several threads write into, each to places the algorithm
/// guarantees are not written concurrently (disjoint owners, or under a lock).
#[derive(Clone, Copy)]
struct Shared<T> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: `Shared` is only a pointer; every use below states why its accesses are
// exclusive (owner-computes) or synchronised (row locks, atomics).
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T: AtomicAdd> Shared<T> {
    /// `dst[i] += value` atomically.
    ///
    /// # Safety
    /// Every concurrent access to `dst[i]` must be atomic.
    unsafe fn atomic_add_at(self, i: usize, value: T) {
        assert!(i < self.len, "element inside the buffer");
        // SAFETY: in bounds (checked); atomic (the caller's contract).
        unsafe { T::atomic_add(self.ptr.add(i), value) };
    }
}

impl<T: Float> Shared<T> {
    fn new(dst: &mut [T]) -> Self {
        Shared {
            ptr: dst.as_mut_ptr(),
            len: dst.len(),
        }
    }

    /// `dst[start..start + src.len()] += alpha * src`, element by element.
    ///
    /// # Safety
    /// No other thread may access that range during the call.
    unsafe fn add_row(self, start: usize, alpha: T, src: &[T]) {
        assert!(start + src.len() <= self.len, "row inside the buffer");
        // SAFETY: in bounds (checked) and exclusive (the caller's contract).
        let row = unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), src.len()) };
        add_scaled(row, alpha, src);
    }

    /// `dst[i] += value`.
    ///
    /// # Safety
    /// No other thread may access `dst[i]` during the call.
    unsafe fn add_at(self, i: usize, value: T) {
        assert!(i < self.len, "element inside the buffer");
        // SAFETY: in bounds (checked) and exclusive (the caller's contract).
        unsafe { *self.ptr.add(i) = *self.ptr.add(i) + value };
    }
}

/// `row += alpha * src`: a multiply then an add per element, never fused.
#[inline]
fn add_scaled<T: Float>(row: &mut [T], alpha: T, src: &[T]) {
    for (d, &s) in row.iter_mut().zip(src) {
        *d = *d + alpha * s;
    }
}

/// `index_add` seen as `dst: [outer, size, inner]`, `src: [outer, n, inner]` and
/// `index: [n]` (every value `< size`, checked by the caller).
#[derive(Clone, Copy, Debug)]
pub(crate) struct IndexAddShape {
    pub outer: usize,
    pub size: usize,
    pub inner: usize,
    pub n: usize,
}

impl IndexAddShape {
    fn source_elements(&self) -> usize {
        self.outer * self.n * self.inner
    }
}

/// True when the parallel paths pay off for `work` source elements.
pub(crate) fn parallel_pays(work: usize) -> bool {
    rayon::current_num_threads() > 1 && work >= PAR_MIN_WORK
}

/// Deterministic `index_add`: the serial loop, or owner-computes with the same bits.
pub(crate) fn index_add_deterministic<T: Float>(
    dst: &mut [T],
    src: &[T],
    index: &[usize],
    shape: IndexAddShape,
    alpha: T,
) {
    if !parallel_pays(shape.source_elements()) {
        return index_add_serial(dst, src, index, shape, alpha);
    }
    let IndexAddShape {
        outer,
        size,
        inner,
        n,
    } = shape;
    let (starts, positions) = rows_by_target(index, size);
    let rows = outer * size;
    let rows_per_chunk = rows.div_ceil(rayon::current_num_threads() * 8).max(1);
    dst.par_chunks_mut(rows_per_chunk * inner)
        .enumerate()
        .for_each(|(chunk, block)| {
            for (i, row) in block.chunks_exact_mut(inner).enumerate() {
                let flat = chunk * rows_per_chunk + i;
                let (o, r) = (flat / size, flat % size);
                for &k in &positions[starts[r]..starts[r + 1]] {
                    add_scaled(row, alpha, &src[(o * n + k) * inner..][..inner]);
                }
            }
        });
}

/// The contributions grouped by target row, each group in index order (a stable
/// counting sort): the source positions of row `r` are `positions[starts[r]..starts[r +
/// 1]]`, ascending. Also what the CUDA owner-computes kernel is given.
pub(crate) fn rows_by_target(index: &[usize], size: usize) -> (Vec<usize>, Vec<usize>) {
    let mut starts = vec![0usize; size + 1];
    for &r in index {
        starts[r + 1] += 1;
    }
    for r in 0..size {
        starts[r + 1] += starts[r];
    }
    let mut next = starts.clone();
    let mut positions = vec![0usize; index.len()];
    for (k, &r) in index.iter().enumerate() {
        positions[next[r]] = k;
        next[r] += 1;
    }
    (starts, positions)
}

/// Every contribution in index order on the calling thread.
fn index_add_serial<T: Float>(
    dst: &mut [T],
    src: &[T],
    index: &[usize],
    shape: IndexAddShape,
    alpha: T,
) {
    let IndexAddShape {
        outer,
        size,
        inner,
        n,
    } = shape;
    for o in 0..outer {
        for (k, &r) in index.iter().enumerate() {
            let row = &mut dst[(o * size + r) * inner..][..inner];
            add_scaled(row, alpha, &src[(o * n + k) * inner..][..inner]);
        }
    }
}

/// Arrival-order `index_add`: threads take chunks of source rows and add each into its
/// target row while holding that row's lock (a spin lock per row, yielding if it waits).
/// Two threads adding into one row take turns in whatever order they arrive, so the
/// sum's rounding depends on timing.
pub(crate) fn index_add_fast<T: Float>(
    dst: &mut [T],
    src: &[T],
    index: &[usize],
    shape: IndexAddShape,
    alpha: T,
) {
    if !parallel_pays(shape.source_elements()) {
        return index_add_serial(dst, src, index, shape, alpha);
    }
    let IndexAddShape {
        outer,
        size,
        inner,
        n,
    } = shape;
    let locks: Vec<AtomicBool> = (0..outer * size).map(|_| AtomicBool::new(false)).collect();
    let shared = Shared::new(dst);
    (0..outer * n)
        .into_par_iter()
        .with_min_len(FAST_CHUNK_ROWS)
        .with_max_len(FAST_CHUNK_ROWS)
        .for_each(|item| {
            let (o, k) = (item / n, item % n);
            let target = o * size + index[k];
            let lock = &locks[target];
            acquire(lock);
            // SAFETY: every write to row `target` happens under `locks[target]`.
            unsafe { shared.add_row(target * inner, alpha, &src[item * inner..][..inner]) };
            lock.store(false, Ordering::Release);
        });
}

/// Spins until `lock` is taken, yielding the core after a short spin (on a machine with
/// few cores the holder may be descheduled).
fn acquire(lock: &AtomicBool) {
    let mut spins = 0u32;
    while lock
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// `scatter_add` as lanes: lane `l` has `n` index elements `index[lane_index(l, k)]`,
/// and element `k` of it adds `src[src_base[l] + k * src_step]` into
/// `dst[dst_base[l] + index * dst_step]`. Lanes never share a target (they differ in a
/// coordinate other than the scattered dimension).
#[derive(Debug)]
pub(crate) struct ScatterLanes {
    /// Per lane: where its targets start in `dst` (index value 0) and its sources in `src`.
    pub bases: Vec<(usize, usize)>,
    /// Index elements per lane.
    pub n: usize,
    /// Lanes' stride in the index's row-major layout along the scattered dimension.
    pub index_step: usize,
    /// `dst` stride of the scattered dimension.
    pub dst_step: usize,
    /// `src` stride of the scattered dimension.
    pub src_step: usize,
}

impl ScatterLanes {
    /// Row-major position in the index of lane `l`'s element `k`.
    fn index_position(&self, l: usize, k: usize) -> usize {
        let inner = self.index_step;
        (l / inner) * self.n * inner + k * inner + l % inner
    }
}

/// Deterministic `scatter_add`: lanes in parallel, each lane's elements in index order,
/// so every target's contributions are added in index order on one thread.
pub(crate) fn scatter_add_deterministic<T: Float>(
    dst: &mut [T],
    src: &[T],
    index: &[usize],
    lanes: &ScatterLanes,
) {
    let shared = Shared::new(dst);
    let lane = |l: usize| {
        let (dst_base, src_base) = lanes.bases[l];
        for k in 0..lanes.n {
            let target = dst_base + index[lanes.index_position(l, k)] * lanes.dst_step;
            let value = src[src_base + k * lanes.src_step];
            // SAFETY: lanes write disjoint targets (see `ScatterLanes`), and this lane
            // runs on one thread.
            unsafe { shared.add_at(target, value) };
        }
    };
    if parallel_pays(index.len()) {
        (0..lanes.bases.len())
            .into_par_iter()
            .with_min_len((PAR_MIN_WORK / lanes.n.max(1)).max(1))
            .for_each(lane);
    } else {
        (0..lanes.bases.len()).for_each(lane);
    }
}

/// The contributions of a `scatter_add` grouped by target, for an owner-computes kernel:
/// `targets` (ascending, each once), and for target `u` the source positions
/// `sources[starts[u]..starts[u + 1]]` in index order.
#[cfg_attr(not(any(feature = "cuda", feature = "host-parity")), allow(dead_code))]
pub(crate) fn scatter_by_target(
    index: &[usize],
    lanes: &ScatterLanes,
) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let mut pairs: Vec<(usize, usize)> = index
        .iter()
        .enumerate()
        .map(|(e, &v)| {
            let inner = lanes.index_step;
            let (o, k, j) = (e / (lanes.n * inner), (e / inner) % lanes.n, e % inner);
            let (dst_base, src_base) = lanes.bases[o * inner + j];
            (dst_base + v * lanes.dst_step, src_base + k * lanes.src_step)
        })
        .collect();
    // Stable: a target's contributions keep their index order.
    pairs.sort_by_key(|&(target, _)| target);
    let (mut targets, mut starts) = (Vec::new(), Vec::new());
    for (p, &(target, _)) in pairs.iter().enumerate() {
        if targets.last() != Some(&target) {
            targets.push(target);
            starts.push(p);
        }
    }
    starts.push(pairs.len());
    (targets, starts, pairs.into_iter().map(|(_, s)| s).collect())
}

/// Arrival-order `scatter_add`: threads split the index elements and add with an atomic
/// compare-and-swap per element. Measured slower than the deterministic path on the
/// machines of `benches/RESULTS.md`, so no op takes it; kept for the benchmark.
pub(crate) fn scatter_add_atomic<T: AtomicAdd>(
    dst: &mut [T],
    src: &[T],
    index: &[usize],
    lanes: &ScatterLanes,
) {
    let shared = Shared::new(dst);
    (0..lanes.bases.len() * lanes.n)
        .into_par_iter()
        .with_min_len(256)
        .for_each(|item| {
            let (l, k) = (item / lanes.n, item % lanes.n);
            let (dst_base, src_base) = lanes.bases[l];
            let target = dst_base + index[lanes.index_position(l, k)] * lanes.dst_step;
            // SAFETY: every concurrent access to `dst` is this atomic add.
            unsafe { shared.atomic_add_at(target, src[src_base + k * lanes.src_step]) };
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_by_target_is_a_stable_counting_sort() {
        let (starts, positions) = rows_by_target(&[2, 0, 2, 1, 2, 0], 4);
        assert_eq!(starts, vec![0, 2, 3, 6, 6]);
        assert_eq!(positions, vec![1, 5, 3, 0, 2, 4]);
    }

    #[test]
    fn atomic_add_adds() {
        let mut x = [1.5f32, 2.0];
        // SAFETY: a valid, unshared element.
        unsafe { f32::atomic_add(&mut x[1], 0.25) };
        assert_eq!(x, [1.5, 2.25]);
        let mut y = 1.0f64;
        // SAFETY: as above.
        unsafe { f64::atomic_add(&mut y, -3.0) };
        assert_eq!(y, -2.0);
    }
}
