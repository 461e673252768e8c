//! Dropout's keep-mask, packed one bit per element (bit `i % 32` of word `i / 32`), and
//! its application to a slice. Forward and backward share both, so backward sees the
//! forward mask bit for bit whether it regenerates it or reads the saved one.

use rayon::prelude::*;
use tensor_core::Element;

use super::args::alloc;
#[cfg(test)]
use super::fill::{fill_batches, Layout};
use super::fill::{for_each_chunk, run_inline, CHUNK_WORDS};
use crate::stream::convert::dropout_keep;
use crate::stream::key::Key;
use crate::stream::philox_batch::{batch_words, BATCH_BLOCKS, BATCH_WORDS};
use crate::RngError;

/// Elements per mask word.
pub(crate) const MASK_BITS: usize = 32;

/// Mask words for `n` elements (the layout of `kernels::mask`, shared with the CUDA
/// kernels).
pub(crate) fn mask_len(n: usize) -> usize {
    kernels::packed_mask_words(n as u64) as usize
}

/// A mask with every element of `n` kept (trailing bits zero).
pub(crate) fn all_kept(n: usize) -> Result<Vec<u32>, RngError> {
    let mut mask = alloc(mask_len(n), u32::MAX)?;
    clear_tail(&mut mask, n);
    Ok(mask)
}

/// Zeroes the bits past element `n - 1`, so masks compare equal however built.
fn clear_tail(mask: &mut [u32], n: usize) {
    let used = n % MASK_BITS;
    if used != 0 {
        if let Some(last) = mask.last_mut() {
            *last &= (1u32 << used) - 1;
        }
    }
}

/// The keep-mask of dropout with probability `p` on `n` elements at `key`: bit `i` set
/// iff `dropout_keep(word i, p)`. One mask word per 32 stream words, in parallel. The
/// ops use [`dropout_fused`], which builds the same mask in the same pass as the output;
/// this separate construction is its reference in the tests.
#[cfg(test)]
pub(crate) fn keep_mask(key: Key, n: usize, p: f32) -> Result<Vec<u32>, RngError> {
    let mut mask = alloc(mask_len(n), 0u32)?;
    // Words past element n - 1 in the last mask word are computed but their bits cleared.
    fill_batches(
        &mut mask,
        key,
        Layout::per_element(MASK_BITS),
        |_, words, out| {
            for (o, group) in out.iter_mut().zip(words.chunks_exact(MASK_BITS)) {
                *o = pack_keep(group, p);
            }
        },
    );
    clear_tail(&mut mask, n);
    Ok(mask)
}

/// Bit `b` set iff `dropout_keep(words[b], p)`, for up to 32 words.
#[inline]
fn pack_keep(words: &[u32], p: f32) -> u32 {
    let mut bits = 0u32;
    for (b, &word) in words.iter().enumerate() {
        bits |= u32::from(dropout_keep(word, p)) << b;
    }
    bits
}

/// `kept(x[i])` where bit `i` of `mask` is set, else `zero`, in parallel by chunks.
pub(crate) fn apply<T: Element>(
    x: &[T],
    mask: &[u32],
    zero: T,
    kept: impl Fn(T) -> T + Sync,
) -> Result<Vec<T>, RngError> {
    debug_assert_eq!(mask.len(), mask_len(x.len()));
    let mut out = alloc(x.len(), zero)?;
    for_each_chunk(&mut out, CHUNK_WORDS, |chunk_index, out| {
        let first = chunk_index * CHUNK_WORDS;
        let x = &x[first..first + out.len()];
        let mask = &mask[first / MASK_BITS..];
        for ((out, x), &bits) in out.chunks_mut(MASK_BITS).zip(x.chunks(MASK_BITS)).zip(mask) {
            match (out.try_into(), x.try_into()) {
                (Ok(out), Ok(x)) => select_masked(out, x, bits, zero, &kept),
                _ => {
                    for (j, (o, &v)) in out.iter_mut().zip(x).enumerate() {
                        let scaled = kept(v);
                        *o = if bits >> j & 1 == 1 { scaled } else { zero };
                    }
                }
            }
        }
    });
    Ok(out)
}

/// `out[j] = kept(x[j])` where bit `j` of `bits` is set, else `zero`, for one full mask
/// word. Out of line, over fixed-size arrays and testing `bits & (1 << j)` (a constant
/// per lane) so that LLVM emits vector compares and selects: the per-element `bt` and
/// branch it produced inside `apply`'s loop mispredicted on every dropped element and
/// cost about 80 us per 128 x 256 f32 gradient (Emerald Rapids Xeon, one thread).
#[inline(never)]
fn select_masked<T: Copy>(
    out: &mut [T; MASK_BITS],
    x: &[T; MASK_BITS],
    bits: u32,
    zero: T,
    kept: &impl Fn(T) -> T,
) {
    for (j, (o, &v)) in out.iter_mut().zip(x).enumerate() {
        let scaled = kept(v);
        *o = if bits & (1 << j) != 0 { scaled } else { zero };
    }
}

/// `out[i] = kept(x[i])` if `dropout_keep(words[i], p)`, else `zero`. Kept out of line
/// (one call per batch): on its own, LLVM turns the loop into vector compares and
/// selects; inlined into the chunk loop it stayed a branch per element.
#[inline(never)]
fn select_kept<T: Copy>(
    out: &mut [T],
    x: &[T],
    words: &[u32; BATCH_WORDS],
    p: f32,
    zero: T,
    kept: &impl Fn(T) -> T,
) {
    for (o, (&v, &w)) in out.iter_mut().zip(x.iter().zip(words)) {
        let scaled = kept(v);
        *o = if dropout_keep(w, p) { scaled } else { zero };
    }
}

/// Dropout in one pass over the stream: `kept(x[i])` where `dropout_keep(word i, p)`,
/// else `zero`, and, with `want_mask`, the packed keep-mask (bit for bit the mask of
/// `keep_mask`, so `apply(x, &keep_mask(..))` gives the same output). Words are those
/// of the stream at `key`, one per element; chunks of whole blocks run in parallel, each
/// with its own stretch of mask words.
pub(crate) fn dropout_fused<T: Element>(
    x: &[T],
    key: Key,
    p: f32,
    zero: T,
    kept: impl Fn(T) -> T + Sync,
    want_mask: bool,
) -> Result<(Vec<T>, Option<Vec<u32>>), RngError> {
    let n = x.len();
    let mut out = alloc(n, zero)?;
    let mut mask = if want_mask {
        alloc(mask_len(n), 0u32)?
    } else {
        Vec::new()
    };
    let run = |chunk_index: usize, out: &mut [T], mask: &mut [u32]| {
        let first = chunk_index * CHUNK_WORDS;
        let x = &x[first..first + out.len()];
        let first_block = key.offset.wrapping_add((first / 4) as u64);
        let mut words = [0u32; BATCH_WORDS];
        let batches = out.chunks_mut(BATCH_WORDS).zip(x.chunks(BATCH_WORDS));
        for (b, (out, x)) in batches.enumerate() {
            batch_words(
                key.seed,
                first_block.wrapping_add((b * BATCH_BLOCKS) as u64),
                &mut words,
            );
            select_kept(out, x, &words, p, zero, &kept);
            // Empty without `want_mask`; else the (up to two) mask words of this batch.
            let mask = mask.iter_mut().skip(b * (BATCH_WORDS / MASK_BITS));
            for (m, group) in mask.zip(words[..out.len()].chunks(MASK_BITS)) {
                *m = pack_keep(group, p);
            }
        }
    };
    let inline = run_inline(n.div_ceil(CHUNK_WORDS));
    if inline && want_mask {
        let chunks = out.chunks_mut(CHUNK_WORDS);
        for (i, (out, mask)) in chunks
            .zip(mask.chunks_mut(CHUNK_WORDS / MASK_BITS))
            .enumerate()
        {
            run(i, out, mask);
        }
    } else if inline {
        for (i, out) in out.chunks_mut(CHUNK_WORDS).enumerate() {
            run(i, out, &mut []);
        }
    } else if want_mask {
        out.par_chunks_mut(CHUNK_WORDS)
            .zip(mask.par_chunks_mut(CHUNK_WORDS / MASK_BITS))
            .enumerate()
            .for_each(|(i, (out, mask))| run(i, out, mask));
    } else {
        out.par_chunks_mut(CHUNK_WORDS)
            .enumerate()
            .for_each(|(i, out)| run(i, out, &mut []));
    }
    Ok((out, want_mask.then_some(mask)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::philox::word_at;

    /// The fused pass equals "mask, then apply" and the per-word definition, for sizes
    /// around batch, mask-word and chunk boundaries, counters that wrap, and 1-3 threads.
    #[test]
    fn fused_dropout_matches_mask_then_apply() {
        let p = 0.3f32;
        for (n, offset) in [
            (0usize, 0u64),
            (1, 5),
            (31, u64::MAX),
            (33, 7),
            (BATCH_WORDS + 3, u64::MAX - 2),
            (CHUNK_WORDS, 11),
            (CHUNK_WORDS + 1, u64::MAX - 4000),
            (3 * CHUNK_WORDS + 77, 3),
        ] {
            let key = Key {
                seed: 0xABCD_EF01_2345_6789,
                offset,
            };
            let x: Vec<f32> = (0..n).map(|i| i as f32 - 3.5).collect();
            let mask = keep_mask(key, n, p).unwrap();
            let expected = apply(&x, &mask, 0.0, |v| v * 1.5).unwrap();
            for (i, &e) in expected.iter().enumerate().step_by(61) {
                let keep = dropout_keep(word_at(key.seed, key.offset, i as u64), p);
                assert_eq!(e, if keep { x[i] * 1.5 } else { 0.0 });
            }
            for threads in 1..=3 {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let (out, packed) = pool
                    .install(|| dropout_fused(&x, key, p, 0.0, |v| v * 1.5, true))
                    .unwrap();
                assert_eq!(packed.as_deref(), Some(&mask[..]), "n {n}");
                let eq = out
                    .iter()
                    .zip(&expected)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(eq && out.len() == n, "n {n} threads {threads}");
                let (out2, none) = pool
                    .install(|| dropout_fused(&x, key, p, 0.0, |v| v * 1.5, false))
                    .unwrap();
                assert_eq!(none, None);
                assert!(out2
                    .iter()
                    .zip(&out)
                    .all(|(a, b)| a.to_bits() == b.to_bits()));
            }
        }
    }
}
