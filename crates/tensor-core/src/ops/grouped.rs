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
//! * **owner rows** (many target rows, where a buffer per group would cost more than the
//!   work): a stable counting sort lists each row's source positions; each row's owner
//!   walks them, closing a group sum whenever the group changes.

use rayon::prelude::*;

use super::accumulate::{add_rows, add_scaled, parallel_pays, rows_by_target, IndexAddShape};
use super::Float;

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
    } else {
        owner_rows(dst, src, index, shape, alpha);
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
        let IndexAddShape {
            outer,
            size,
            inner,
            n,
        } = shape;
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

/// Each target row's owner walks its source positions (ascending), closing a group sum
/// into the row whenever the group changes.
fn owner_rows<T: Float>(dst: &mut [T], src: &[T], index: &[usize], shape: IndexAddShape, alpha: T) {
    let IndexAddShape { size, inner, n, .. } = shape;
    let (starts, positions) = rows_by_target(index, size);
    let own = |first_row: usize, block: &mut [T]| {
        let mut partial = vec![T::ZERO; inner];
        for (i, row) in block.chunks_exact_mut(inner).enumerate() {
            let flat = first_row + i;
            let (o, r) = (flat / size, flat % size);
            let mut group = None;
            for &k in &positions[starts[r]..starts[r + 1]] {
                let g = k / INDEX_ADD_GROUP;
                if group != Some(g) {
                    if group.is_some() {
                        add_rows(row, &partial);
                        partial.fill(T::ZERO);
                    }
                    group = Some(g);
                }
                add_scaled(&mut partial, alpha, &src[(o * n + k) * inner..][..inner]);
            }
            if group.is_some() {
                add_rows(row, &partial);
                partial.fill(T::ZERO);
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
