//! The CPU bodies of `index_add` and `scatter_add`: how contributions are added into
//! shared targets, deterministically or in arrival order.
//!
//! Every path adds the same terms (`alpha * x`, a multiply then an add, never fused, as
//! `axpy_` does); they differ only in the *order* in which the contributions to one
//! target element are added, which is what changes float bits:
//!
//! * **deterministic**: `index_add` in the grouped order of `grouped.rs`; `scatter_add`
//!   in index order, lanes in parallel (here);
//! * **fast** (arrival order, in `arrival_order.rs`): threads add into shared targets in
//!   whatever order they get there. Not reproducible with more than one thread.

pub(crate) mod arrival_order;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub(crate) mod grouped;
pub mod index_add;

use rayon::prelude::*;

use crate::ops::Float;

/// Below this many source elements the parallel paths are not worth starting (the same
/// threshold as the elementwise ops); only speed depends on it, never values.
pub(crate) const PAR_MIN_WORK: usize = crate::ops::PAR_MIN_LEN;

/// A destination buffer several threads write into, each to places the algorithm
/// guarantees are not written concurrently (disjoint owners, or under a lock).
#[derive(Clone, Copy)]
pub(crate) struct Shared<T> {
    pub(crate) ptr: *mut T,
    pub(crate) len: usize,
}

// SAFETY: `Shared` is only a pointer; every use below states why its accesses are
// exclusive (owner-computes) or synchronised (row locks, atomics).
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T: Float> Shared<T> {
    pub(crate) fn new(dst: &mut [T]) -> Self {
        Shared {
            ptr: dst.as_mut_ptr(),
            len: dst.len(),
        }
    }

    /// `dst[start..start + src.len()] += alpha * src`, element by element.
    ///
    /// # Safety
    /// No other thread may access that range during the call.
    pub(crate) unsafe fn add_row(self, start: usize, alpha: T, src: &[T]) {
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
pub(crate) fn add_scaled<T: Float>(row: &mut [T], alpha: T, src: &[T]) {
    for (d, &s) in row.iter_mut().zip(src) {
        *d = *d + alpha * s;
    }
}

/// `row += partial`, element by element.
#[inline]
pub(crate) fn add_rows<T: Float>(row: &mut [T], partial: &[T]) {
    for (d, &p) in row.iter_mut().zip(partial) {
        *d = *d + p;
    }
}

/// `index_add` seen as `dst: [outer, size, inner]`, `src: [outer, n, inner]` and
/// `index: [n]` (every value `< size`, checked by the caller).
#[derive(Clone, Copy, Debug)]
pub struct IndexAddShape {
    /// The product of the dims before `dim`.
    pub outer: usize,
    /// `dst`'s extent along `dim`: the number of targets.
    pub size: usize,
    /// The product of the dims after `dim`.
    pub inner: usize,
    /// `src`'s extent along `dim`: the number of contributions (and of index values).
    pub n: usize,
}

impl IndexAddShape {
    pub(crate) fn source_elements(&self) -> usize {
        self.outer * self.n * self.inner
    }
}

/// True when the parallel paths pay off for `work` source elements.
pub(crate) fn parallel_pays(work: usize) -> bool {
    rayon::current_num_threads() > 1 && work >= PAR_MIN_WORK
}

/// The contributions grouped by target row, each group in index order (a stable
/// counting sort): the source positions of row `r` are `positions[starts[r]..starts[r +
/// 1]]`, ascending. Also what the CUDA owner-computes kernel is given.
pub fn rows_by_target(index: &[usize], size: usize) -> (Vec<usize>, Vec<usize>) {
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
pub(crate) fn index_add_serial<T: Float>(
    dst: &mut [T],
    src: &[T],
    index: &[usize],
    shape: IndexAddShape,
    alpha: T,
) {
    let (outer, size, inner, n) = (shape.outer, shape.size, shape.inner, shape.n);
    for o in 0..outer {
        for (k, &r) in index.iter().enumerate() {
            let row = &mut dst[(o * size + r) * inner..][..inner];
            add_scaled(row, alpha, &src[(o * n + k) * inner..][..inner]);
        }
    }
}

/// `scatter_add` as lanes: lane `l` has `n` index elements `index[lane_index(l, k)]`,
/// and element `k` of it adds `src[src_base[l] + k * src_step]` into
/// `dst[dst_base[l] + index * dst_step]`. Lanes never share a target (they differ in a
/// coordinate other than the scattered dimension).
#[derive(Debug)]
pub struct ScatterLanes {
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

/// The checked arguments of `scatter_add`: its lanes and index values.
pub struct ScatterArgs {
    /// The op as lanes of `self` and `src` along `dim`.
    pub lanes: ScatterLanes,
    /// The index values, each checked against `self`'s extent along `dim`.
    pub index: Vec<usize>,
}

impl ScatterLanes {
    /// Row-major position in the index of lane `l`'s element `k`.
    pub(crate) fn index_position(&self, l: usize, k: usize) -> usize {
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
pub fn scatter_by_target(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_by_target_is_a_stable_counting_sort() {
        let (starts, positions) = rows_by_target(&[2, 0, 2, 1, 2, 0], 4);
        assert_eq!(starts, vec![0, 2, 3, 6, 6]);
        assert_eq!(positions, vec![1, 5, 3, 0, 2, 4]);
    }
}
