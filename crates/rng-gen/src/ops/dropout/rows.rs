//! `dropout_rows`: dropout of some rows of a batch whose stretch of the stream was
//! reserved once, for all rows.
//!
//! Why? In data parallel training each rank holds some rows of a global batch. If each
//! rank drew dropout for its own rows as a batch of its own, the masks would depend on
//! how rows are spread over ranks (and ranks seeded alike would draw the same masks).
//! Instead every rank reserves the stretch of the whole global batch, so generators stay
//! in lockstep, and computes its rows at their global element indices: row `r` of a
//! batch of rows of `row_len` elements uses words `r * row_len ..` of the op, exactly
//! the words a single process dropping out the whole batch gives that row
//! (docs/contract.md §3: word `w` of the op is lane `w % 4` of block `o + w / 4`; §9.1).
//! Masks therefore equal the single-process run's row for row, and never collide
//! between ranks.

use tensor_core::Tensor;

use super::mask::{mask_len, MASK_BITS};
use super::{dropout_backward, dropout_scale, DropoutState, PackedMask};
use crate::ops::args::{check_float, probability};
use crate::stream::convert::dropout_keep;
use crate::stream::key::Key;
use crate::stream::philox_batch::{batch_words, BATCH_WORDS};
use crate::{Generator, RngError};

/// Where the attention dropout's mask comes from. Training passes one; evaluation passes
/// none (nothing is drawn).
#[derive(Clone, Copy, Debug)]
pub enum AttentionDropout<'a> {
    /// Draw from `generator`: reserves what `dropout` of the `[batch, heads, t, t]`
    /// probabilities reserves, and uses it as `dropout` does (entry `b` is row `b`).
    Draw {
        /// The drop probability, in [0, 1].
        p: f64,
        /// The generator the reservation comes from.
        generator: &'a Generator,
    },
    /// Rows of a global batch whose stretch was reserved once at `key` (data parallel
    /// ranks; [`dropout_rows`]): entry `b` is row `rows[b]` of
    /// `batch_rows`.
    Rows {
        /// The drop probability, in [0, 1].
        p: f64,
        /// The whole global batch's reservation.
        key: Key,
        /// Rows in the global batch.
        batch_rows: u64,
        /// The global row of each batch entry.
        rows: &'a [u64],
    },
}

/// Dropout of the rows `rows` of a batch of `batch_rows` rows whose stream was reserved
/// at `key`, for example by `generator.reserve(RandomOp::Dropout, dtype, n)` with `n =
/// batch_rows * row_len`, made once, by every rank alike. `x` is `[rows.len(), ...]`; its `k`-th
/// row is row `rows[k]` of the batch and gets that row's mask and values: the same as
/// row `rows[k]` of [`dropout`](super::dropout) on the whole batch at `key`, bit for bit,
/// on CPU and CUDA. Rows may come in any order, strided or repeated.
///
/// Draws nothing from a generator (the caller reserved). The returned state always
/// holds the packed mask, which is what [`dropout_backward`] must use: the rows are not
/// one contiguous stretch of the stream, so the state's key (the batch's base) cannot
/// regenerate them. Errors unless `x` is a float tensor whose first dimension is
/// `rows.len()`, `p` is in [0, 1], every row is below `batch_rows` and the batch's
/// element count fits in a u64.
pub fn dropout_rows(
    x: &Tensor,
    p: f64,
    key: Key,
    batch_rows: u64,
    rows: &[u64],
) -> Result<(Tensor, DropoutState), RngError> {
    const OP: &str = "dropout_rows";
    check_float(OP, x.dtype())?;
    let p32 = probability(OP, p)?;
    let bad = |reason: String| Err(RngError::InvalidRows { op: OP, reason });
    if x.rank() == 0 || x.dims()[0] != rows.len() {
        return bad(format!(
            "x must be [rows, ...] with {} rows, got dims {:?}",
            rows.len(),
            x.dims()
        ));
    }
    let row_len: u64 = x.dims()[1..].iter().map(|&d| d as u64).product();
    if row_len.checked_mul(batch_rows).is_none() {
        return bad(format!(
            "{batch_rows} rows of {row_len} elements overflow the stream's u64 word index"
        ));
    }
    if let Some(&row) = rows.iter().find(|&&r| r >= batch_rows) {
        return bad(format!("row {row} is not in the batch's 0..{batch_rows}"));
    }
    let mask = keep_mask_of_rows(key, row_len, rows, p32)?;
    let state = DropoutState {
        key,
        p,
        scale: dropout_scale(p32),
        n: x.elem_count() as u64,
        train: true,
        packed_mask: Some(PackedMask::Host(mask)),
    };
    // Backward with a saved mask is the forward's arithmetic: `x * scale` where kept.
    let out = dropout_backward(x, &state)?;
    Ok((out, state))
}

/// The packed keep-mask of `rows`, each `row_len` words from word `row * row_len` of the
/// stream at `key`, concatenated (bit `i % 32` of word `i / 32` for output element `i`).
fn keep_mask_of_rows(key: Key, row_len: u64, rows: &[u64], p: f32) -> Result<Vec<u32>, RngError> {
    let n = rows.len() as u64 * row_len;
    let mut mask = tensor_core::try_zeroed_vec::<u32>(mask_len(n as usize))?;
    let mut words = [0u32; BATCH_WORDS];
    let mut bit = 0usize;
    for &row in rows {
        let (mut word, end) = (row * row_len, (row + 1) * row_len);
        while word < end {
            // 16 blocks from the one holding `word`; `word` is lane `word % 4` of it.
            batch_words(key.seed, key.offset.wrapping_add(word / 4), &mut words);
            let lane = (word % 4) as usize;
            let take = (BATCH_WORDS - lane).min((end - word) as usize);
            for &w in &words[lane..lane + take] {
                mask[bit / MASK_BITS] |= u32::from(dropout_keep(w, p)) << (bit % MASK_BITS);
                bit += 1;
            }
            word += take as u64;
        }
    }
    Ok(mask)
}

#[cfg(test)]
mod tests {
    use tensor_core::{DType, Device};

    use super::*;
    use crate::ops::dropout::dropout_with_mask;
    use crate::Generator;

    fn batch(rows: usize, row_len: usize) -> Tensor {
        let values = (0..rows * row_len).map(|i| i as f32 * 0.25 - 7.0).collect();
        Tensor::from_vec(values, &[rows, row_len], Device::Cpu).unwrap()
    }

    fn bits(t: &Tensor) -> Vec<u64> {
        t.to_bits().unwrap()
    }

    /// Any subset of rows equals those rows of the whole batch's dropout, for row
    /// lengths that start rows mid-block (7, 33), a block-aligned one (256), and offsets
    /// that wrap past 2^64; backward from the state equals the batch's backward rows.
    #[test]
    fn rows_equal_the_whole_batch_dropout_row_for_row() {
        for (row_len, offset) in [(7usize, 3u64), (33, u64::MAX - 5), (256, 12)] {
            let rows = 20;
            let g = Generator::from_key(
                Device::Cpu,
                Key {
                    seed: 0x5eed,
                    offset,
                },
            );
            let x = batch(rows, row_len);
            let (whole, whole_state) = dropout_with_mask(&x, 0.3, true, Some(&g)).unwrap();
            let key = whole_state.key;
            let picks: [&[u64]; 4] = [&[0, 1, 2], &[19, 3, 3, 8], &[1, 5, 9, 13, 17], &[]];
            for pick in picks {
                let idx: Vec<usize> = pick.iter().map(|&r| r as usize).collect();
                let mine = x.index_select(0, &idx).unwrap();
                let (out, state) = dropout_rows(&mine, 0.3, key, rows as u64, pick).unwrap();
                let expected = whole.index_select(0, &idx).unwrap();
                assert_eq!(
                    bits(&out),
                    bits(&expected),
                    "row_len {row_len} rows {pick:?}"
                );
                let grad = batch(rows, row_len);
                let whole_grad = dropout_backward(&grad, &whole_state).unwrap();
                let back = dropout_backward(&grad.index_select(0, &idx).unwrap(), &state).unwrap();
                let expected = whole_grad.index_select(0, &idx).unwrap();
                assert_eq!(bits(&back), bits(&expected));
            }
            let all: Vec<u64> = (0..rows as u64).collect();
            let (_, state) = dropout_rows(&x, 0.3, key, rows as u64, &all).unwrap();
            assert_eq!(state.packed_mask, whole_state.packed_mask);
        }
    }

    #[test]
    fn bad_rows_are_typed_errors() {
        let key = Key { seed: 1, offset: 0 };
        let x = batch(2, 4);
        let invalid = |r: Result<(Tensor, DropoutState), RngError>| {
            matches!(r, Err(RngError::InvalidRows { .. }))
        };
        assert!(invalid(dropout_rows(&x, 0.5, key, 4, &[0])));
        assert!(invalid(dropout_rows(&x, 0.5, key, 4, &[0, 4])));
        assert!(invalid(dropout_rows(&x, 0.5, key, u64::MAX, &[0, 1])));
        let ints = Tensor::zeros(&[1, 4], DType::I64, Device::Cpu).unwrap();
        assert!(dropout_rows(&ints, 0.5, key, 4, &[0]).is_err());
        assert!(dropout_rows(&x, 1.5, key, 4, &[0, 1]).is_err());
    }
}
