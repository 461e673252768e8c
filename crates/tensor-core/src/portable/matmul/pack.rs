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
/// `out[i0 * kc + p * mr + r]` (`p = k - depth.start`), rows past `a.rows` as zeros.
pub(super) fn pack_a<T: PortableElement>(
    a: &Operand<'_, T>,
    depth: Range<usize>,
    mr: usize,
    out: &mut [T],
) {
    let kc = depth.len();
    for (panel, dst) in out.chunks_exact_mut(mr * kc).enumerate() {
        let i0 = panel * mr;
        for (p, k) in depth.clone().enumerate() {
            for r in 0..mr {
                let i = i0 + r;
                dst[p * mr + r] = if i < a.rows { a.at(i, k) } else { T::default() };
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
        for (p, k) in depth.clone().enumerate() {
            let row = &mut dst[p * nr..(p + 1) * nr];
            for (j, v) in row.iter_mut().enumerate() {
                let col = j0 + j;
                *v = if col < b.cols {
                    b.at(k, col)
                } else {
                    T::default()
                };
            }
        }
    }
}
