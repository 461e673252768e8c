//! Packing: copying one `k`-block of A and B into the panel layouts the micro-kernels
//! read contiguously. Packing moves values, never computes, so it cannot change a bit;
//! it is where strided views (transposes) are read through their strides.

use std::ops::Range;

use rayon::prelude::*;

use super::{Operand, PortableElement};

/// `x` rounded up to a multiple of `unit`.
pub(super) fn round_up(x: usize, unit: usize) -> usize {
    x.div_ceil(unit) * unit
}

/// A's rows in panels of `mr`: rows `i0 .. i0 + mr` for the depths `k` go to
/// `out[i0 * kc + p * mr + r]` (`p = k - depth.start`), rows past `a.rows` as zeros.
/// Memory is read in the order it lies: a transposed view (`row_stride == 1`, the weight
/// gradient's `grad^T`) depth by depth, `mr` adjacent elements copied at a time; a
/// row-major A row by row along `k` ([`interleave`]).
pub(super) fn pack_a<T: PortableElement>(
    a: &Operand<'_, T>,
    depth: Range<usize>,
    mr: usize,
    out: &mut [T],
    parallel: bool,
) {
    let kc = depth.len();
    for_each_panel(out, mr * kc, parallel, |panel, dst| {
        let i0 = panel * mr;
        let height = mr.min(a.rows - i0);
        if a.row_stride == 1 {
            for (p, dst_p) in depth.clone().zip(dst.chunks_exact_mut(mr)) {
                let base = a.offset + i0 + p * a.col_stride;
                dst_p[..height].copy_from_slice(&a.data[base..base + height]);
                dst_p[height..].fill(T::default());
            }
        } else if a.col_stride == 1 {
            let row = |r: usize| {
                let base = a.offset + (i0 + r) * a.row_stride + depth.start;
                &a.data[base..base + kc]
            };
            interleave(dst, mr, height, row);
        } else {
            let at =
                |r: usize, p: usize| a.data[a.offset + (i0 + r) * a.row_stride + p * a.col_stride];
            gather(dst, mr, height, depth.clone(), at);
        }
    });
}

/// B's columns in panels of `nr`: columns `j0 .. j0 + nr` for the depths `k` go to
/// `out[j0 * kc + p * nr + j]`, columns past `b.cols` as zeros. As in [`pack_a`], memory
/// is read in the order it lies: a row-major B is copied `nr` adjacent elements at a
/// time; a transposed view (`row_stride == 1`, the forward's `x * w^T`) column by column
/// along `k`.
pub(super) fn pack_b<T: PortableElement>(
    b: &Operand<'_, T>,
    depth: Range<usize>,
    nr: usize,
    out: &mut [T],
    parallel: bool,
) {
    let kc = depth.len();
    for_each_panel(out, nr * kc, parallel, |panel, dst| {
        let j0 = panel * nr;
        let width = nr.min(b.cols - j0);
        if b.col_stride == 1 {
            for (k, dst_p) in depth.clone().zip(dst.chunks_exact_mut(nr)) {
                let base = b.offset + k * b.row_stride + j0;
                dst_p[..width].copy_from_slice(&b.data[base..base + width]);
                dst_p[width..].fill(T::default());
            }
        } else if b.row_stride == 1 {
            let column = |j: usize| {
                let base = b.offset + depth.start + (j0 + j) * b.col_stride;
                &b.data[base..base + kc]
            };
            interleave(dst, nr, width, column);
        } else {
            let at =
                |j: usize, k: usize| b.data[b.offset + k * b.row_stride + (j0 + j) * b.col_stride];
            gather(dst, nr, width, depth.clone(), at);
        }
    });
}

/// `pack(panel_index, panel)` for every `len`-element panel of `out`, on rayon's pool when
/// `parallel`. Each panel is written by one call whatever the thread, so the packed
/// values are the same either way; on the large MLP's step the serial packing was about
/// a fifth of the portable step's time on 2 threads.
fn for_each_panel<T: PortableElement>(
    out: &mut [T],
    len: usize,
    parallel: bool,
    pack: impl Fn(usize, &mut [T]) + Sync,
) {
    if parallel {
        out.par_chunks_exact_mut(len)
            .enumerate()
            .for_each(|(i, dst)| pack(i, dst));
    } else {
        out.chunks_exact_mut(len)
            .enumerate()
            .for_each(|(i, dst)| pack(i, dst));
    }
}

/// `dst[p * stride + j] = source(j)[p]` for `j < count` and every `p`, and zero for
/// `count <= j < stride`: the transpose that packing does when a panel's `stride` lanes
/// lie in memory as `count` separate runs along `k`. Eight sources at a time, so each
/// panel row gets eight adjacent values (one cache line written, not eight) from eight
/// sequential read streams; on the demo's forward `x * w^T` this took packing from about
/// a quarter of the portable step's time to about a tenth.
fn interleave<'s, T: PortableElement>(
    dst: &mut [T],
    stride: usize,
    count: usize,
    source: impl Fn(usize) -> &'s [T],
) {
    let grouped = count - count % 8;
    for j in (0..grouped).step_by(8) {
        let sources: [&[T]; 8] = std::array::from_fn(|g| source(j + g));
        for (p, dst_p) in dst.chunks_exact_mut(stride).enumerate() {
            for (v, s) in dst_p[j..j + 8].iter_mut().zip(&sources) {
                *v = s[p];
            }
        }
    }
    for j in grouped..count {
        for (dst_p, &v) in dst.chunks_exact_mut(stride).zip(source(j)) {
            dst_p[j] = v;
        }
    }
    pad(dst, stride, count);
}

/// `dst[p * stride + j] = at(j, k)` for `j < count`, `k` in `depth` (`p = k -
/// depth.start`), zero beyond `count`: any other layout (neither stride is 1), element by
/// element.
fn gather<T: PortableElement>(
    dst: &mut [T],
    stride: usize,
    count: usize,
    depth: Range<usize>,
    at: impl Fn(usize, usize) -> T,
) {
    for (k, dst_p) in depth.zip(dst.chunks_exact_mut(stride)) {
        for (j, v) in dst_p[..count].iter_mut().enumerate() {
            *v = at(j, k);
        }
    }
    pad(dst, stride, count);
}

/// Zeroes lanes `count..stride` of every panel row (rows or columns past the operand).
fn pad<T: PortableElement>(dst: &mut [T], stride: usize, count: usize) {
    if count < stride {
        for dst_p in dst.chunks_exact_mut(stride) {
            dst_p[count..].fill(T::default());
        }
    }
}
