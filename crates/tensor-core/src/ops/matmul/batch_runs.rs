//! How the batch entries of a batched product become strided-batched gemm calls.
//!
//! cuBLAS's `gemmStridedBatched` takes one stride per operand: entry `i` is at `start +
//! i * stride`. A run of consecutive batch dimensions can be one such call when, in each
//! operand, every dimension of the run steps over exactly the whole of the next one
//! (`stride[d] == stride[d + 1] * dims[d + 1]`, dimensions of size 1 skipped): a dense
//! batch collapses completely, into one call. Attention's heads do not: `[b, t, h, d]`
//! viewed as `[b, h, t, d]` has batch strides `(t * h * d, d)`, so `b` and `h` each
//! collapse on their own but not together. Then the run with the most entries is one
//! call, and the other dimensions are looped over, one call per index of them (for
//! those heads, one call per head or per sequence). This loop is where the product
//! still falls back to several calls: it cannot be one call because no single stride
//! per operand describes the entries. A single dimension always has one stride, so
//! this never makes more calls than entries divided by the largest batch dimension.
//!
//! Every entry is the same gemm however the entries are grouped, so the grouping
//! never changes a result on the stand-in; on a GPU, cuBLAS does not promise that a
//! batched call rounds as single calls of its entries would, but the grouping depends
//! only on the shapes and strides, so runs stay reproducible.

use std::ops::Range;

/// One strided-batched call: `count` entries, entry `i` of each operand (lhs, rhs,
/// output) at `start + i * stride` elements of its storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BatchCall {
    pub(crate) count: usize,
    pub(crate) start: [usize; 3],
    pub(crate) stride: [usize; 3],
}

/// The one stride that steps through the entries of the batch dims `run` of an operand
/// with batch `strides`, or `None` when no single stride does. Dims of size 1 are never
/// stepped over, so their strides do not matter; a run of only those steps by 0.
fn run_stride(dims: &[usize], strides: &[usize], run: Range<usize>) -> Option<usize> {
    let stepped: Vec<usize> = run.filter(|&d| dims[d] > 1).collect();
    let uniform = stepped
        .windows(2)
        .all(|w| strides[w[0]] == strides[w[1]] * dims[w[1]]);
    uniform.then(|| stepped.last().map_or(0, |&d| strides[d]))
}

/// The strided-batched calls that cover a product with batch dims `dims`, whose
/// operands (lhs, rhs, output) have batch strides `strides` and storage offsets
/// `offsets`: the run of consecutive dims with the most entries that has one stride in
/// all three is one call per index of the other dims, split further where a call would
/// exceed `max_count` entries (cuBLAS's 32-bit batch count). Calls come in row-major
/// order of those indices.
pub(crate) fn batch_calls(
    dims: &[usize],
    strides: [&[usize]; 3],
    offsets: [usize; 3],
    max_count: usize,
) -> Vec<BatchCall> {
    let mut best = (0..0, 1, [0; 3]); // (run, entries, strides): a rank-0 batch is 1 entry
    for lo in 0..dims.len() {
        for hi in lo + 1..=dims.len() {
            let entries: usize = dims[lo..hi].iter().product();
            if entries <= best.1 && !best.0.is_empty() {
                continue;
            }
            let per_operand = strides.map(|s| run_stride(dims, s, lo..hi));
            if let [Some(a), Some(b), Some(c)] = per_operand {
                best = (lo..hi, entries, [a, b, c]);
            }
        }
    }
    let (run, entries, stride) = best;
    let others: Vec<usize> = (0..dims.len()).filter(|d| !run.contains(d)).collect();
    let loops: usize = others.iter().map(|&d| dims[d]).product();
    let mut calls = Vec::new();
    for index in 0..loops {
        let mut start = offsets;
        let mut rest = index;
        for &d in others.iter().rev() {
            let i = rest % dims[d];
            rest /= dims[d];
            for (s, operand) in start.iter_mut().zip(strides) {
                *s += i * operand[d];
            }
        }
        let mut done = 0;
        while done < entries {
            let count = (entries - done).min(max_count.max(1));
            calls.push(BatchCall {
                count,
                start: [0, 1, 2].map(|o| start[o] + done * stride[o]),
                stride,
            });
            done += count;
        }
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::{batch_calls, BatchCall};

    /// Every entry of a product, as (lhs, rhs, output) offsets, in row-major batch order.
    fn entries_by_index(dims: &[usize], strides: [&[usize]; 3]) -> Vec<[usize; 3]> {
        let total: usize = dims.iter().product();
        (0..total)
            .map(|mut b| {
                let mut at = [0; 3];
                for d in (0..dims.len()).rev() {
                    let i = b % dims[d];
                    b /= dims[d];
                    for (x, s) in at.iter_mut().zip(strides) {
                        *x += i * s[d];
                    }
                }
                at
            })
            .collect()
    }

    /// The entries the calls cover, sorted by their output offset.
    fn covered(calls: &[BatchCall]) -> Vec<[usize; 3]> {
        let mut all: Vec<[usize; 3]> = calls
            .iter()
            .flat_map(|c| {
                (0..c.count).map(move |i| [0, 1, 2].map(|o| c.start[o] + i * c.stride[o]))
            })
            .collect();
        all.sort_by_key(|e| e[2]);
        all
    }

    #[test]
    fn a_dense_batch_is_one_call() {
        let (dims, mn) = ([2, 3, 4], 35);
        let dense = [12 * 5 * 7, 4 * 5 * 7, 5 * 7];
        let out = [12 * mn, 4 * mn, mn];
        let calls = batch_calls(&dims, [&dense, &dense, &out], [0, 0, 0], i32::MAX as usize);
        assert_eq!(
            calls,
            vec![BatchCall {
                count: 24,
                start: [0, 0, 0],
                stride: [5 * 7, 5 * 7, mn],
            }]
        );
    }

    #[test]
    fn attention_heads_are_one_call_per_index_of_the_smaller_dim() {
        // [b, t, h, d] = [8, 32, 2, 16] viewed as [b, h, t, d]: batch strides (t h d, d).
        let (b, t, h, d) = (8, 32, 2, 16);
        let heads = [t * h * d, d];
        let scores = [h * t * t, t * t];
        let calls = batch_calls(
            &[b, h],
            [&heads, &heads, &scores],
            [3, 5, 0],
            i32::MAX as usize,
        );
        assert_eq!(calls.len(), h, "one call per head, each over the batch");
        assert!(calls.iter().all(|c| c.count == b));
        let want = entries_by_index(&[b, h], [&heads, &heads, &scores]);
        let want: Vec<[usize; 3]> = want.iter().map(|e| [e[0] + 3, e[1] + 5, e[2]]).collect();
        assert_eq!(covered(&calls), want);
    }

    #[test]
    fn size_one_dims_collapse_with_any_stride_and_big_batches_are_split() {
        let dims = [1, 5, 1, 3];
        let a = [999, 3 * 20, 7, 20];
        let b = [0, 0, 0, 0]; // an expanded operand: every entry the same matrix
        let out = [15 * 6, 3 * 6, 3 * 6, 6];
        let calls = batch_calls(&dims, [&a, &b, &out], [0, 0, 0], i32::MAX as usize);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].stride, [20, 0, 6]);
        let split = batch_calls(&dims, [&a, &b, &out], [0, 0, 0], 4);
        assert_eq!(
            split.iter().map(|c| c.count).collect::<Vec<_>>(),
            [4, 4, 4, 3]
        );
        assert_eq!(covered(&split), entries_by_index(&dims, [&a, &b, &out]));
    }

    #[test]
    fn no_collapsing_run_loops_over_every_other_dim() {
        // Three dims, each pair broken in the lhs: the largest single dim is the call.
        let dims = [2, 3, 2];
        let a = [1000, 100, 7];
        let dense = [6 * 4, 2 * 4, 4];
        let calls = batch_calls(&dims, [&a, &dense, &dense], [0, 0, 0], i32::MAX as usize);
        assert_eq!(calls.len(), 4);
        assert!(calls
            .iter()
            .all(|c| c.count == 3 && c.stride == [100, 8, 8]));
        assert_eq!(
            covered(&calls),
            entries_by_index(&dims, [&a, &dense, &dense])
        );
    }
}
