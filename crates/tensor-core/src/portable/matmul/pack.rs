//! Packing: copying one `k`-block of A and B into the panel layouts the micro-kernels
//! read contiguously. Packing moves values, never computes, so it cannot change a bit;
//! it is where strided views (transposes) are read through their strides.

use std::ops::Range;

use super::{Operand, PortableElement};

/// `x` rounded up to a multiple of `unit`.
pub(super) fn round_up(x: usize, unit: usize) -> usize {
    x.div_ceil(unit) * unit
}

/// A's rows in panels of `mr`: rows `i0 .. i0 + mr` for the depths `k` go to
/// `out[i0 * kc + p * mr + r]` (`p = k - depth.start`), rows past `a.rows` as zeros. Each
/// row is walked along `k` (contiguous in a row-major A).
pub(super) fn pack_a<T: PortableElement>(
    a: &Operand<'_, T>,
    depth: Range<usize>,
    mr: usize,
    out: &mut [T],
) {
    let kc = depth.len();
    for (panel, dst) in out.chunks_exact_mut(mr * kc).enumerate() {
        for r in 0..mr {
            let i = panel * mr + r;
            if i >= a.rows {
                for p in 0..kc {
                    dst[p * mr + r] = T::default();
                }
                continue;
            }
            let base = a.offset + i * a.row_stride + depth.start * a.col_stride;
            let row = &a.data[base..=base + (kc - 1) * a.col_stride];
            for p in 0..kc {
                dst[p * mr + r] = row[p * a.col_stride];
            }
        }
    }
}

/// B's columns in panels of `nr`: columns `j0 .. j0 + nr` for the depths `k` go to
/// `out[j0 * kc + p * nr + j]`, columns past `b.cols` as zeros.
pub(super) fn pack_b<T: PortableElement>(
    b: &Operand<'_, T>,
    depth: Range<usize>,
    nr: usize,
    out: &mut [T],
) {
    let kc = depth.len();
    for (panel, dst) in out.chunks_exact_mut(nr * kc).enumerate() {
        let j0 = panel * nr;
        let width = nr.min(b.cols - j0);
        for (p, k) in depth.clone().enumerate() {
            let row = &mut dst[p * nr..(p + 1) * nr];
            let base = b.offset + k * b.row_stride + j0 * b.col_stride;
            let src = &b.data[base..=base + (width - 1) * b.col_stride];
            for (j, v) in row[..width].iter_mut().enumerate() {
                *v = src[j * b.col_stride];
            }
            row[width..].fill(T::default());
        }
    }
}
