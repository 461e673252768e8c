//! The deterministic `index_add`: contributions summed in a fixed grouped order that
//! does not depend on threads, launch configuration or device.
//!
//! # The order (part of ditto's reproducibility contract)
//! Split the source positions `0..n` into consecutive groups of [`INDEX_ADD_GROUP`]
//! (the last shorter). For every target element:
//! 1. for each group in order that has contributions to the element's row, sum them in
//!    index order starting from `+0.0` (each term `alpha * x`, a multiply then an add);
//! 2. add each group's sum to the element, in group order (groups without contributions
//!    add nothing).
//!
//! CUDA's owner-computes kernel follows the same order (`ditto_index_add_owner_item`),
//! so CPU and GPU agree bit for bit. Grouping costs nothing in accuracy (it is the first
//! level of a pairwise sum) and lets the CPU stream through the source like the fast
//! path does.
//!
//! # Two implementations, one result
//! * **group partials** (few target rows): groups are summed in parallel into private
//!   buffers, a wave at a time, then each target row adds the wave's partials in group
//!   order; the source is read once, in order, and the buffers stay in cache;
//! * **row ranges** (many target rows of 8+ elements, `index_add` along the first dim:
//!   an embedding backward): each thread owns a contiguous range of target rows and
//!   streams through the whole source in order, group by group, adding its rows' terms;
//! * **owner rows** (many target rows otherwise): a stable counting sort lists each
//!   row's source positions; each row's owner walks them, closing a group sum whenever
//!   the group changes.

use rayon::prelude::*;

use crate::ops::accumulate::{add_rows, add_scaled, parallel_pays, rows_by_target, IndexAddShape};
use crate::ops::Float;

/// Source positions per group of the deterministic `index_add` (see the module docs).
/// Fixed: changing it changes results, and the CUDA kernel must use the same value
/// (`DITTO_INDEX_ADD_GROUP`).
pub const INDEX_ADD_GROUP: usize = 1024;

/// Up to this many target rows (`outer * size`), the group-partials implementation runs.
const FEW_ROWS: usize = 256;

/// `dst[o, index[k], :] += alpha * src[o, k, :]` in the grouped order.
pub(crate) fn index_add_deterministic<T: Float>(
    dst: &mut [T],
    src: &[T],
    index: &[usize],
    shape: IndexAddShape,
    alpha: T,
) {
    if shape.outer * shape.size <= FEW_ROWS {
        group_partials(dst, src, index, shape, alpha);
    } else if shape.outer == 1 && shape.inner >= STREAM_MIN_INNER {
        row_ranges(dst, src, index, shape, alpha);
    } else {
        owner_rows(dst, src, index, shape, alpha);
    }
}

/// From this row length up, [`row_ranges`] runs for many rows: its index scans (three
/// per thread) are then small next to the row additions.
const STREAM_MIN_INNER: usize = 8;

/// Marks a row without a scratch slot in [`RangeOwner`].
const NO_SLOT: u32 = u32::MAX;

/// One thread's contiguous range of target rows, streamed group by group.
struct RangeOwner<T> {
    first: usize,
    /// Contributions of each row of the range in the current group.
    count: Vec<u32>,
    /// Scratch slot of each row with 2+ contributions in the current group.
    slot: Vec<u32>,
    /// Scratch rows: group sums of rows with 2+ contributions.
    partial: Vec<T>,
    /// Rows that hold a slot, in order of first contribution.
    pending: Vec<usize>,
}

impl<T: Float> RangeOwner<T> {
    /// Adds group `positions`' contributions to the rows of `dst` (this range) in the
    /// grouped order: a row with one contribution in the group gets `+0.0 + alpha * x`
    /// added in one pass; a row with more gets its group sum, built in a scratch row,
    /// added at the end of the group.
    fn add_group(
        &mut self,
        dst: &mut [T],
        positions: std::ops::Range<usize>,
        src: &[T],
        index: &[usize],
        inner: usize,
        alpha: T,
    ) {
        let rows = self.count.len();
        let local = |k: usize| index[k].wrapping_sub(self.first);
        for k in positions.clone() {
            if local(k) < rows {
                self.count[local(k)] += 1;
            }
        }
        for k in positions.clone() {
            let r = local(k);
            if r >= rows {
                continue;
            }
            let x = &src[k * inner..][..inner];
            if self.count[r] == 1 {
                for (d, &x) in dst[r * inner..][..inner].iter_mut().zip(x) {
                    *d = *d + (T::ZERO + alpha * x);
                }
            } else if self.slot[r] == NO_SLOT {
                self.slot[r] = self.pending.len() as u32;
                self.pending.push(r);
                let start = self.partial.len();
                self.partial.extend(x.iter().map(|&x| T::ZERO + alpha * x));
                debug_assert_eq!(start, self.slot[r] as usize * inner);
            } else {
                let s = self.slot[r] as usize;
                add_scaled(&mut self.partial[s * inner..][..inner], alpha, x);
            }
        }
        for (s, &r) in self.pending.iter().enumerate() {
            add_rows(
                &mut dst[r * inner..][..inner],
                &self.partial[s * inner..][..inner],
            );
            self.slot[r] = NO_SLOT;
        }
        self.pending.clear();
        self.partial.clear();
        for k in positions {
            if local(k) < rows {
                self.count[local(k)] = 0;
            }
        }
    }
}

/// Target rows split into one contiguous range per thread; each thread streams through
/// the whole source in order, group by group, adding only its rows' contributions.
/// Reads stay sequential (unlike [`owner_rows`]' gathers), so this runs at about the
/// speed of the arrival-order path. `outer == 1` only.
fn row_ranges<T: Float>(dst: &mut [T], src: &[T], index: &[usize], shape: IndexAddShape, alpha: T) {
    let IndexAddShape { size, inner, n, .. } = shape;
    let threads = if parallel_pays(shape.source_elements()) {
        rayon::current_num_threads()
    } else {
        1
    };
    let rows_per_range = size.div_ceil(threads).max(1);
    let run = |(i, block): (usize, &mut [T])| {
        let rows = block.len() / inner;
        let mut owner = RangeOwner {
            first: i * rows_per_range,
            count: vec![0; rows],
            slot: vec![NO_SLOT; rows],
            partial: Vec::new(),
            pending: Vec::new(),
        };
        for start in (0..n).step_by(INDEX_ADD_GROUP) {
            let positions = start..(start + INDEX_ADD_GROUP).min(n);
            owner.add_group(block, positions, src, index, inner, alpha);
        }
    };
    if threads > 1 {
        dst.par_chunks_mut(rows_per_range * inner)
            .enumerate()
            .for_each(run);
    } else {
        run((0, dst));
    }
}

/// One group's sums: a buffer of every target row, and which rows it touched.
struct GroupSum<T> {
    rows: Vec<T>,
    touched: Vec<usize>,
    is_touched: Vec<bool>,
}

impl<T: Float> GroupSum<T> {
    fn new(shape: IndexAddShape) -> Self {
        let rows = shape.outer * shape.size;
        GroupSum {
            rows: vec![T::ZERO; rows * shape.inner],
            touched: Vec::new(),
            is_touched: vec![false; rows],
        }
    }

    /// Sums group `g` into the (cleared) buffer.
    fn sum_group(&mut self, g: usize, src: &[T], index: &[usize], shape: IndexAddShape, alpha: T) {
        let (outer, size, inner, n) = (shape.outer, shape.size, shape.inner, shape.n);
        for &row in &self.touched {
            self.rows[row * inner..][..inner].fill(T::ZERO);
            self.is_touched[row] = false;
        }
        self.touched.clear();
        let positions = g * INDEX_ADD_GROUP..((g + 1) * INDEX_ADD_GROUP).min(n);
        for o in 0..outer {
            for k in positions.clone() {
                let row = o * size + index[k];
                if !self.is_touched[row] {
                    self.is_touched[row] = true;
                    self.touched.push(row);
                }
                add_scaled(
                    &mut self.rows[row * inner..][..inner],
                    alpha,
                    &src[(o * n + k) * inner..][..inner],
                );
            }
        }
    }
}

/// Groups summed in parallel a wave at a time, each wave's sums added to the rows in
/// group order (rows in parallel).
fn group_partials<T: Float>(
    dst: &mut [T],
    src: &[T],
    index: &[usize],
    shape: IndexAddShape,
    alpha: T,
) {
    let groups = shape.n.div_ceil(INDEX_ADD_GROUP);
    let parallel = parallel_pays(shape.source_elements());
    let wave = if parallel {
        rayon::current_num_threads() * 2
    } else {
        1
    };
    let mut sums: Vec<GroupSum<T>> = (0..wave.min(groups))
        .map(|_| GroupSum::new(shape))
        .collect();
    let inner = shape.inner;
    for first in (0..groups).step_by(wave) {
        let count = wave.min(groups - first);
        let fill = |(i, sum): (usize, &mut GroupSum<T>)| {
            sum.sum_group(first + i, src, index, shape, alpha)
        };
        if parallel {
            sums[..count].par_iter_mut().enumerate().for_each(fill);
        } else {
            sums[..count].iter_mut().enumerate().for_each(fill);
        }
        let wave_sums = &sums[..count];
        let merge = |(row, d): (usize, &mut [T])| {
            for sum in wave_sums {
                if sum.is_touched[row] {
                    add_rows(d, &sum.rows[row * inner..][..inner]);
                }
            }
        };
        if parallel {
            dst.par_chunks_mut(inner)
                .with_min_len(64)
                .enumerate()
                .for_each(merge);
        } else {
            dst.chunks_mut(inner).enumerate().for_each(merge);
        }
    }
}

/// Each target row's owner walks its source positions (ascending) a group at a time:
/// a group of one contribution is added in one fused pass (`row + (+0.0 + alpha * x)`,
/// the same two roundings as a one-term group sum), a longer group is summed into a
/// scratch row first. Embedding-like inputs (many rows, few tokens per row and group)
/// are almost all groups of one.
fn owner_rows<T: Float>(dst: &mut [T], src: &[T], index: &[usize], shape: IndexAddShape, alpha: T) {
    let IndexAddShape { size, inner, n, .. } = shape;
    let (starts, positions) = rows_by_target(index, size);
    let own = |first_row: usize, block: &mut [T]| {
        let mut partial = vec![T::ZERO; inner];
        for (i, row) in block.chunks_exact_mut(inner).enumerate() {
            let flat = first_row + i;
            let (o, r) = (flat / size, flat % size);
            let source = |k: usize| &src[(o * n + k) * inner..][..inner];
            let list = &positions[starts[r]..starts[r + 1]];
            let mut begin = 0;
            while begin < list.len() {
                let group = list[begin] / INDEX_ADD_GROUP;
                let end = begin
                    + list[begin..]
                        .iter()
                        .take_while(|&&k| k / INDEX_ADD_GROUP == group)
                        .count();
                if end == begin + 1 {
                    for (d, &x) in row.iter_mut().zip(source(list[begin])) {
                        *d = *d + (T::ZERO + alpha * x);
                    }
                } else {
                    for (p, &x) in partial.iter_mut().zip(source(list[begin])) {
                        *p = T::ZERO + alpha * x;
                    }
                    for &k in &list[begin + 1..end] {
                        add_scaled(&mut partial, alpha, source(k));
                    }
                    add_rows(row, &partial);
                }
                begin = end;
            }
        }
    };
    if parallel_pays(shape.source_elements()) {
        let rows = shape.outer * size;
        let rows_per_block = rows.div_ceil(rayon::current_num_threads() * 8).max(1);
        dst.par_chunks_mut(rows_per_block * inner)
            .enumerate()
            .for_each(|(b, block)| own(b * rows_per_block, block));
    } else {
        own(0, dst);
    }
}
