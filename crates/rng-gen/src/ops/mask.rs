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
use crate::stream::philox_batch::{batch_words_inline, BATCH_BLOCKS, BATCH_WORDS};
use crate::widest_simd::with_widest_simd;
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

/// Bit `b` set iff `dropout_keep(words[b], p)`, for up to 32 words (the reference
/// packing; the ops use [`keep_bits`]).
#[cfg(test)]
fn pack_keep(words: &[u32], p: f32) -> u32 {
    let mut bits = 0u32;
    for (b, &word) in words.iter().enumerate() {
        bits |= u32::from(dropout_keep(word, p)) << b;
    }
    bits
}

/// Bit `i` set iff `dropout_keep(words[i], p)`, for the 64 words of one batch. Over a
/// fixed-size array with constant shifts, so that with AVX-512 LLVM emits four vector
/// compares into mask registers instead of a shift and an OR per word.
#[inline(always)]
fn keep_bits(words: &[u32; BATCH_WORDS], p: f32) -> u64 {
    let mut bits = 0u64;
    for (i, &word) in words.iter().enumerate() {
        bits |= u64::from(dropout_keep(word, p)) << i;
    }
    bits
}

const _: () = assert!(BATCH_WORDS == 2 * MASK_BITS);

/// `out[j] = kept(x[j])` where bit `j` of `bits` is set, else `zero`, for the (up to 32)
/// elements of one mask word. A full word goes through fixed-size arrays testing
/// `bits & (1 << j)` (a constant per lane), which LLVM turns into vector selects; testing
/// `bits >> j & 1` per element gave a `bt` and a branch that mispredicted on every
/// dropped element (about 80 us per 128 x 256 f32 gradient, Emerald Rapids Xeon).
#[inline(always)]
fn select_by_bits<T: Copy>(out: &mut [T], x: &[T], bits: u32, zero: T, kept: &impl Fn(T) -> T) {
    match (out.try_into(), x.try_into()) {
        (Ok(out), Ok(x)) => {
            let (out, x): (&mut [T; MASK_BITS], &[T; MASK_BITS]) = (out, x);
            for (j, (o, &v)) in out.iter_mut().zip(x).enumerate() {
                let scaled = kept(v);
                *o = if bits & (1 << j) != 0 { scaled } else { zero };
            }
        }
        _ => {
            for (j, (o, &v)) in out.iter_mut().zip(x).enumerate() {
                let scaled = kept(v);
                *o = if bits & (1 << j) != 0 { scaled } else { zero };
            }
        }
    }
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
        with_widest_simd(
            #[inline(always)]
            || {
                let groups = out.chunks_mut(MASK_BITS).zip(x.chunks(MASK_BITS));
                for ((out, x), &bits) in groups.zip(mask) {
                    select_by_bits(out, x, bits, zero, &kept);
                }
            },
        );
    });
    Ok(out)
}

/// One chunk of [`dropout_fused`]: `out` (elements `first ..` of the op, `x` the same
/// stretch of input) from the stream at `seed` starting at block `first_block`, and its
/// mask words into `mask` (empty when the caller wants none). The last mask word may get
/// bits past the op's last element; the caller clears them.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn dropout_chunk<T: Copy>(
    x: &[T],
    out: &mut [T],
    mask: &mut [u32],
    seed: u64,
    first_block: u64,
    p: f32,
    zero: T,
    kept: &impl Fn(T) -> T,
) {
    let mut words = [0u32; BATCH_WORDS];
    let batches = out.chunks_mut(BATCH_WORDS).zip(x.chunks(BATCH_WORDS));
    for (b, (out, x)) in batches.enumerate() {
        let block = first_block.wrapping_add((b * BATCH_BLOCKS) as u64);
        batch_words_inline(seed, block, &mut words);
        let keep = keep_bits(&words, p);
        let halves = [keep as u32, (keep >> 32) as u32];
        let groups = out.chunks_mut(MASK_BITS).zip(x.chunks(MASK_BITS));
        for (half, (out, x)) in groups.enumerate() {
            select_by_bits(out, x, halves[half], zero, kept);
            if let Some(m) = mask.get_mut(2 * b + half) {
                *m = halves[half];
            }
        }
    }
}

/// Dropout in one pass over the stream: `kept(x[i])` where `dropout_keep(word i, p)`,
/// else `zero`, and, with `want_mask`, the packed keep-mask (bit for bit the mask of
/// `keep_mask`, so `apply(x, &keep_mask(..))` gives the same output). Words are those
/// of the stream at `key`, one per element; chunks of whole blocks run in parallel, each
/// with its own stretch of mask words, compiled for the widest SIMD the CPU has.
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
        with_widest_simd(
            #[inline(always)]
            || dropout_chunk(x, out, mask, key.seed, first_block, p, zero, &kept),
        );
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
    clear_tail(&mut mask, n);
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
