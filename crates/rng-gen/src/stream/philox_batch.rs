//! Philox4x32-10 on [`BATCH_BLOCKS`] consecutive blocks at once, for the CPU samplers.
//!
//! The specification is the scalar [`philox4x32_10`](super::philox::philox4x32_10) in
//! `stream/philox.rs` (same constants, same round, same key schedule); this module only
//! changes the *shape* of the computation so that LLVM vectorises it across blocks:
//! each round is a plain loop over the blocks, and each 32-bit word is held in the low
//! half of a `u64`, which is the shape of `pmuludq` / `vpmuludq` (32x32 -> 64-bit
//! products of the low halves of 64-bit lanes), so no packing or unpacking is needed
//! between rounds. It is integer arithmetic only, so vectorisation cannot change a bit;
//! unit tests check every word against the scalar engine, counters wrapping included.
//!
//! On x86-64 the same code is also compiled with AVX-512F and with AVX2 enabled, and the
//! widest the CPU has is chosen at run time (8 or 4 products per instruction instead of
//! SSE2's 2); without either, or on other targets, the portable build runs. All are the
//! one function [`philox4x32_10_batch`], so they cannot disagree.

use super::philox::{PHILOX_M0, PHILOX_M1, PHILOX_ROUNDS, PHILOX_W0, PHILOX_W1};
use crate::widest_simd::with_widest_simd;

/// Blocks computed together.
pub const BATCH_BLOCKS: usize = 16;
/// Words produced by one batch (four per block).
pub const BATCH_WORDS: usize = 4 * BATCH_BLOCKS;

/// The low 32 bits of a `u64`.
const LO: u64 = 0xFFFF_FFFF;

/// Four counter words of [`BATCH_BLOCKS`] blocks, `lanes[l][j]` = word `l` of block `j`,
/// each held in the low half of a `u64` (the high half is zero).
type Lanes = [[u64; BATCH_BLOCKS]; 4];

/// One Philox round on every block, in place: the scalar `round` of `stream/philox.rs`,
/// block by block. `hi0:lo0 = M0 * c0`, `hi1:lo1 = M1 * c2`, new counter
/// `(hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)`.
#[inline(always)]
fn round(c: &mut Lanes, key: [u32; 2]) {
    let (k0, k1) = (u64::from(key[0]), u64::from(key[1]));
    let [c0, c1, c2, c3] = c;
    for j in 0..BATCH_BLOCKS {
        // The words are below 2^32; the masks tell LLVM so (one 32x32 -> 64 product).
        let product0 = u64::from(PHILOX_M0) * (c0[j] & LO);
        let product1 = u64::from(PHILOX_M1) * (c2[j] & LO);
        let (hi0, lo0) = (product0 >> 32, product0 & LO);
        let (hi1, lo1) = (product1 >> 32, product1 & LO);
        let (old1, old3) = (c1[j], c3[j]);
        c0[j] = hi1 ^ old1 ^ k0;
        c1[j] = lo1;
        c2[j] = hi0 ^ old3 ^ k1;
        c3[j] = lo0;
    }
}

/// Philox4x32-10 on [`BATCH_BLOCKS`] counters at once (`counters[l][j]`: word `l` of
/// counter `j`) under one key: output `[l][j]` equals
/// `philox4x32_10([counters[0][j], .., counters[3][j]], key)[l]`. The loop over rounds
/// and the key schedule are those of the scalar function.
#[must_use]
#[inline(always)]
pub fn philox4x32_10_batch(
    counters: &[[u32; BATCH_BLOCKS]; 4],
    key: [u32; 2],
) -> [[u32; BATCH_BLOCKS]; 4] {
    let mut c: Lanes = [[0; BATCH_BLOCKS]; 4];
    for (wide, lane) in c.iter_mut().zip(counters) {
        for (w, &word) in wide.iter_mut().zip(lane) {
            *w = u64::from(word);
        }
    }
    let mut key = key;
    for r in 0..PHILOX_ROUNDS {
        if r > 0 {
            key = [
                key[0].wrapping_add(PHILOX_W0),
                key[1].wrapping_add(PHILOX_W1),
            ];
        }
        round(&mut c, key);
    }
    let mut out = [[0u32; BATCH_BLOCKS]; 4];
    for (lane, wide) in out.iter_mut().zip(&c) {
        for (word, &w) in lane.iter_mut().zip(wide) {
            *word = w as u32;
        }
    }
    out
}

/// The words of blocks `first_block .. first_block + BATCH_BLOCKS` (block numbers wrap
/// modulo 2^64) of the stream keyed by `seed`, in stream order: `words[4*j + l]` is
/// lane `l` of block `first_block + j`, i.e. `block_words(seed, first_block + j)[l]`
/// (DESIGN.md §1 key and counter layout).
#[inline]
pub fn batch_words(seed: u64, first_block: u64, words: &mut [u32; BATCH_WORDS]) {
    with_widest_simd(
        #[inline(always)]
        || batch_words_inline(seed, first_block, words),
    );
}

/// [`batch_words`] compiled for the instruction set of wherever it is inlined: AVX-512F,
/// AVX2 or the target's baseline inside [`with_widest_simd`] (in [`batch_words`], or in a
/// caller that runs whole passes under it, like the dropout pass).
#[inline(always)]
pub(crate) fn batch_words_inline(seed: u64, first_block: u64, words: &mut [u32; BATCH_WORDS]) {
    let mut counters = [[0u32; BATCH_BLOCKS]; 4];
    let [lo, hi, _, _] = &mut counters;
    for (j, (lo, hi)) in lo.iter_mut().zip(hi).enumerate() {
        let block = first_block.wrapping_add(j as u64);
        *lo = block as u32;
        *hi = (block >> 32) as u32;
    }
    let out = philox4x32_10_batch(&counters, [seed as u32, (seed >> 32) as u32]);
    for (j, block) in words.chunks_exact_mut(4).enumerate() {
        for (l, word) in block.iter_mut().enumerate() {
            *word = out[l][j];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::philox::{block_words, philox4x32_10};

    /// A small xorshift for test inputs (no dependency on the engine under test).
    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn batch_matches_scalar_on_random_counters_and_keys() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..2_000 {
            let mut counters = [[0u32; BATCH_BLOCKS]; 4];
            for lane in &mut counters {
                for word in lane.iter_mut() {
                    *word = xorshift(&mut state) as u32;
                }
            }
            let key = xorshift(&mut state);
            let key = [key as u32, (key >> 32) as u32];
            let batch = philox4x32_10_batch(&counters, key);
            for j in 0..BATCH_BLOCKS {
                let counter = [
                    counters[0][j],
                    counters[1][j],
                    counters[2][j],
                    counters[3][j],
                ];
                let scalar = philox4x32_10(counter, key);
                for l in 0..4 {
                    assert_eq!(batch[l][j], scalar[l], "counter {counter:x?} key {key:x?}");
                }
            }
        }
    }

    #[test]
    fn batch_words_match_block_words_with_wrapping_counters() {
        let mut state = 0x0123_4567_89AB_CDEFu64;
        let mut firsts = vec![
            0,
            u64::MAX,
            u64::MAX - 3,
            u64::MAX - BATCH_BLOCKS as u64 + 1,
            u32::MAX as u64 - 5, // the low counter word wraps into the high one
        ];
        firsts.extend((0..200).map(|_| xorshift(&mut state)));
        for (i, first) in firsts.into_iter().enumerate() {
            let seed = if i % 3 == 0 {
                u64::MAX
            } else {
                xorshift(&mut state)
            };
            // The dispatched version (AVX-512 or AVX2 where the CPU has it), the portable
            // one, and AVX2 on an AVX-512 CPU (which the dispatch would not pick).
            let mut words = [0u32; BATCH_WORDS];
            let mut portable = [0u32; BATCH_WORDS];
            batch_words(seed, first, &mut words);
            batch_words_inline(seed, first, &mut portable);
            assert_eq!(words, portable);
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                let mut avx2 = [0u32; BATCH_WORDS];
                // SAFETY: the CPU has AVX2 (checked just above).
                unsafe { crate::widest_simd::avx2(|| batch_words_inline(seed, first, &mut avx2)) };
                assert_eq!(avx2, portable);
            }
            for j in 0..BATCH_BLOCKS {
                let expected = block_words(seed, first.wrapping_add(j as u64));
                assert_eq!(
                    words[4 * j..4 * j + 4],
                    expected,
                    "seed {seed:x} first {first:x} block {j}"
                );
            }
        }
    }

    #[test]
    fn known_answers_in_every_lane() {
        // DESIGN.md §1 known answers, placed in different lanes of one batch.
        let cases: [([u32; 4], [u32; 4]); 2] = [
            ([0; 4], [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]),
            (
                [u32::MAX; 4],
                [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
            ),
        ];
        for (counter, expected) in cases {
            let key = [counter[0]; 2];
            let counters = counter.map(|w| [w; BATCH_BLOCKS]);
            let out = philox4x32_10_batch(&counters, key);
            for (lane, expected) in out.iter().zip(expected) {
                assert!(lane.iter().all(|&word| word == expected));
            }
        }
    }
}
