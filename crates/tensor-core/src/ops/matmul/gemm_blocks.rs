//! The default-arithmetic CPU matmul (gemm) on every core, with bits that do not depend
//! on the thread count.
//!
//! The output `C (m x n)` is cut into blocks by [`output_blocks`], whose block shape is
//! a function of `(m, n, k)` alone. Each block is one single-threaded gemm call
//! (`Parallelism::None`) over the whole of `k`, reading the block's rows of A and columns
//! of B in place through their strides, so what is computed for every element is fixed
//! before any thread is asked: threads decide only *which* worker computes a block,
//! never *what* it computes. The blocks run on rayon's current pool when it has more
//! than one thread, in a plain loop otherwise; both give the same bits.
//!
//! gemm's own `Parallelism::Rayon(n)` is not used: gemm 0.19 sizes its tasks and its
//! packing from `n`, and does not promise that the sums stay the same (see
//! `ops/matmul/mod.rs`).
//!
//! Small products are one block (the call ditto made before it fanned out, so the demo
//! MLP's products keep their bits and their speed): every gemm call has a fixed cost
//! (its packing buffers, its dispatch), and blocks too small to hide it make the whole
//! product slower even on one thread. On the 2-core Xeon of `benches/RESULTS.md`
//! (AVX-512, load 6-8 from other builds), blocks of 32 x 64 at a 2^20 multiply-add
//! floor made the large MLP's 256x784x1024 product about 2x slower on one thread
//! (`matmul/<shape>/gemm/1t` of `benches/portable_matmul.rs`, two interleaved rounds);
//! [`MIN_BLOCK_WORK`] and [`MIN_EXTENT`] keep blocks far above that.

use std::ops::Range;

use rayon::prelude::*;

use crate::portable::matmul::{blocks, Operand};
use crate::{Element, Result, TensorError};

/// A block is halved only while each half keeps at least this many multiply-adds
/// (`rows * cols * k`, about 0.4 ms on one core of the AVX-512 Xeon above), so the fixed
/// cost of a gemm call stays a few percent of its work. Every product of the demo MLP
/// (at most 128 x 256 x 256) is one block. It was 2^25 until the GPT of nanoGPT's CPU
/// recipe (batch 12 x 64 tokens, width 128) showed that none of its products, 25 to 50
/// M multiply-adds each, then reached a second thread: 2 threads ran 1.0x one, and run
/// 1.4x with 2^24 (`train_step --gpt 4,4,128,64 --batch 12`, benches/RESULTS.md).
pub(crate) const MIN_BLOCK_WORK: usize = 1 << 24;
/// Rows or columns of a block are never halved below this: gemm packs the other
/// operand once per block and fills its register tiles (up to 48 rows on AVX-512) best
/// when a block has many of them.
const MIN_EXTENT: usize = 64;
/// At most this many blocks: enough for a many-core machine to share a large product;
/// more would only repeat packing.
const MAX_BLOCKS: usize = 128;

/// The block shape `(rows, cols)` of C for an `m x k` by `k x n` product: the whole of C
/// halved, the longer side first, while both halves keep [`MIN_BLOCK_WORK`] multiply-adds
/// and [`MIN_EXTENT`] rows / columns and there are under [`MAX_BLOCKS`] blocks. A pure
/// function of `(m, n, k)`: the thread count is not an input, so it cannot change the
/// blocks, and so not the bits.
pub(crate) fn output_blocks(m: usize, n: usize, k: usize) -> (usize, usize) {
    let (mut rows, mut cols) = (m.max(1), n.max(1));
    let work = |r: usize, c: usize| r.saturating_mul(c).saturating_mul(k);
    let count = |r: usize, c: usize| m.div_ceil(r) * n.div_ceil(c);
    loop {
        let (half_rows, half_cols) = (rows.div_ceil(2), cols.div_ceil(2));
        let by_rows = (rows >= 2 * MIN_EXTENT).then_some((half_rows, cols));
        let by_cols = (cols >= 2 * MIN_EXTENT).then_some((rows, half_cols));
        let next = if rows >= cols {
            by_rows.or(by_cols)
        } else {
            by_cols.or(by_rows)
        };
        match next {
            Some((r, c)) if work(r, c) >= MIN_BLOCK_WORK && count(r, c) <= MAX_BLOCKS => {
                (rows, cols) = (r, c);
            }
            _ => return (rows, cols),
        }
    }
}

/// The output's raw pointer, shared by tasks that write disjoint blocks.
#[derive(Clone, Copy)]
struct Output<T>(*mut T);
// SAFETY: tasks write disjoint blocks (each element belongs to exactly one block).
unsafe impl<T: Send> Send for Output<T> {}
unsafe impl<T: Send> Sync for Output<T> {}

/// `dst (m x n) = a (m x k) * b (k x n)` with gemm, block by block ([`output_blocks`]).
/// `T` is f32 or f64: the one caller, `product_2d` (`ops/matmul/product.rs`), takes only those.
/// The bound is gemm's own (any element; gemm picks its kernel by type) so that this
/// file needs nothing from the product above it.
pub(crate) fn gemm_into<T: Element>(a: Operand<'_, T>, b: Operand<'_, T>) -> Result<Vec<T>> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let count = m.checked_mul(n).ok_or(TensorError::InvalidArgument {
        op: "matmul",
        message: format!("{m} x {n} output elements overflow usize"),
    })?;
    // Uninitialised: gemm writes every element (each task zeroes its own block when k is
    // 0, where gemm has nothing to write).
    let mut dst = crate::creation::try_with_capacity::<T>(count, <T as Element>::DTYPE)?;
    if m == 0 || n == 0 {
        return Ok(dst);
    }
    let (block_rows, block_cols) = output_blocks(m, n, k);
    let tasks: Vec<(Range<usize>, Range<usize>)> = blocks(m, block_rows)
        .into_iter()
        .flat_map(|r| {
            blocks(n, block_cols)
                .into_iter()
                .map(move |c| (r.clone(), c))
        })
        .collect();
    let out = Output(dst.as_mut_ptr());
    let task = |(rows, cols): &(Range<usize>, Range<usize>)| {
        // SAFETY: `rows x cols` lies inside C (m x n, row stride n) and belongs to this
        // task alone; A's rows and B's columns are inside their views.
        unsafe { gemm_block(&a, &b, out, n, rows.clone(), cols.clone()) }
    };
    // A one-thread pool would only hand the blocks to its worker and wait; the blocks
    // are the same either way, so this changes speed only.
    if tasks.len() > 1 && rayon::current_num_threads() > 1 {
        tasks.par_iter().for_each(task);
    } else {
        tasks.iter().for_each(task);
    }
    // SAFETY: the blocks tile C (`blocks` covers `0..m` and `0..n`), and every task
    // wrote each element of its block (gemm, or the zeroing when k = 0): all `count`
    // elements are written.
    unsafe { dst.set_len(count) };
    Ok(dst)
}

/// `C[rows, cols] = A[rows, :] * B[:, cols]`: one single-threaded gemm call over all of
/// `k`, with A and B read through their strides (a transposed view stays one: gemm's
/// order depends on the layout, so a view keeps the bits it had before C was split).
///
/// # Safety
/// `rows` / `cols` lie inside C (`m x n`, row stride `ldc`, at `out`) and inside A's rows
/// and B's columns; no other thread touches that block of C meanwhile.
unsafe fn gemm_block<T: Element>(
    a: &Operand<'_, T>,
    b: &Operand<'_, T>,
    out: Output<T>,
    ldc: usize,
    rows: Range<usize>,
    cols: Range<usize>,
) {
    // Strides come from valid views whose offsets lie inside their buffers, so they fit
    // in isize (a Vec never exceeds isize::MAX bytes).
    let stride = |s: usize| s as isize;
    let (one, zero) = (T::from_f64(1.0), T::from_f64(0.0));
    // gemm overwrites every element of the block (`read_dst` is false below) when
    // there is anything to sum; with k = 0 the block is the empty sum, zero, written
    // here (all-zero bits are +0.0 for every float element). Zeroing always was a
    // twentieth of a small GPT's CPU step: a second pass over every output.
    if a.cols == 0 {
        for r in rows.clone() {
            // SAFETY: row `r`'s columns `cols` lie inside C and belong to this block.
            unsafe { std::ptr::write_bytes(out.0.add(r * ldc + cols.start), 0, cols.len()) };
        }
    }
    // SAFETY: every index gemm forms is `offset + i * row_stride + j * col_stride` with
    // `i`, `j` inside the block, which the operands' views keep inside their buffers;
    // the block of C lies inside the caller's m x n buffer.
    unsafe {
        gemm::gemm(
            rows.len(),
            cols.len(),
            a.cols,
            out.0.add(rows.start * ldc + cols.start),
            1,
            stride(ldc),
            false,
            a.data.as_ptr().add(a.offset + rows.start * a.row_stride),
            stride(a.col_stride),
            stride(a.row_stride),
            b.data.as_ptr().add(b.offset + cols.start * b.col_stride),
            stride(b.col_stride),
            stride(b.row_stride),
            zero,
            one,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{output_blocks, MAX_BLOCKS, MIN_BLOCK_WORK, MIN_EXTENT};

    #[test]
    fn small_products_are_one_block() {
        // (m, n, k): ragged ones, and the demo's products forward and backward.
        for (m, n, k) in [
            (1, 1, 1),
            (7, 5, 13),
            (129, 65, 257),
            (128, 256, 64),
            (128, 256, 256),
            (128, 10, 256),
            (256, 256, 128),
            (128, 64, 256),
            (0, 9, 9),
            (9, 0, 9),
        ] {
            assert_eq!(output_blocks(m, n, k), (m.max(1), n.max(1)), "{m}x{n}x{k}");
        }
    }

    #[test]
    fn large_products_split_into_blocks_that_keep_their_work() {
        for (m, n, k) in [
            (256, 1024, 784),
            (256, 1024, 1024),
            (1024, 784, 256),
            (4096, 4096, 4096),
            (1, 1 << 20, 4096),
            (768, 384, 128), // the CPU recipe GPT's c_attn: batch 12 x 64 tokens
        ] {
            let (r, c) = output_blocks(m, n, k);
            let count = m.div_ceil(r) * n.div_ceil(c);
            assert!(count > 1, "{m}x{n}x{k} is one block");
            assert!(count <= MAX_BLOCKS, "{m}x{n}x{k}: {count} blocks");
            assert!(r * c * k >= MIN_BLOCK_WORK, "{m}x{n}x{k}: {r}x{c}");
            assert!(
                r >= MIN_EXTENT.min(m) && c >= MIN_EXTENT.min(n),
                "{m}x{n}x{k}"
            );
        }
        // The large MLP's first layer: 256 x 1024 in eight 128 x 256 blocks.
        assert_eq!(output_blocks(256, 1024, 784), (128, 256));
    }
}
