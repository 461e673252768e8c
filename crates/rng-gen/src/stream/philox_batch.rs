//! Philox4x32-10 on [`BATCH_BLOCKS`] consecutive blocks at once, for the CPU samplers.
//!
//! The engine is [`philox4x32_10_lanes`] in `stream/philox.rs` (the one round function,
//! the one key schedule); this module only lays out a batch of consecutive blocks as its
//! lanes and puts the words back in stream order. On x86-64 the CPU fill runs whole
//! chunks of batches under `with_widest_simd`, so the
//! lanes become AVX-512 or AVX2 vectors (8 or 4 products per instruction instead of
//! SSE2's 2); integer arithmetic only, so every instruction set gives the same words.
//! Unit tests check every word against the one-counter engine, counters wrapping
//! included, for every instruction set the CPU has.

use super::philox::philox4x32_10_lanes;
use crate::simd::with_widest_simd;

/// Blocks computed together: enough independent multiply chains to hide their latency
/// with AVX-512, few enough to stay in registers.
pub const BATCH_BLOCKS: usize = 32;
/// Words produced by one batch (four per block): what a sampler's batch body gets.
pub const BATCH_WORDS: usize = 4 * BATCH_BLOCKS;

/// Philox4x32-10 on [`BATCH_BLOCKS`] counters at once (`counters[l][j]`: word `l` of
/// counter `j`) under one key: [`philox4x32_10_lanes`] with a batch of lanes.
#[must_use]
#[inline(always)]
pub fn philox4x32_10_batch(
    counters: &[[u32; BATCH_BLOCKS]; 4],
    key: [u32; 2],
) -> [[u32; BATCH_BLOCKS]; 4] {
    philox4x32_10_lanes(counters, key)
}

/// The words of blocks `first_block .. first_block + BATCH_BLOCKS` (block numbers wrap
/// modulo 2^64) of the stream keyed by `seed`, in stream order: `words[4*j + l]` is
/// lane `l` of block `first_block + j`, i.e. `block_words(seed, first_block + j)[l]`
/// (docs/contract.md §3 key and counter layout).
#[inline]
pub fn batch_words(seed: u64, first_block: u64, words: &mut [u32; BATCH_WORDS]) {
    with_widest_simd(
        #[inline(always)]
        || batch_words_inline(seed, first_block, words),
    );
}

/// [`batch_words`] compiled for the instruction set of wherever it is inlined: AVX-512,
/// AVX2 or the target's baseline inside [`with_widest_simd`] (in [`batch_words`], or in
/// the CPU fill, which runs whole chunks under it).
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
    use crate::simd::{with_simd, SimdLevel};
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
            // The dispatched version, and every instruction set this CPU can run.
            let mut words = [0u32; BATCH_WORDS];
            batch_words(seed, first, &mut words);
            for level in SimdLevel::available() {
                let mut at_level = [0u32; BATCH_WORDS];
                with_simd(level, || batch_words_inline(seed, first, &mut at_level));
                assert_eq!(at_level, words, "{level:?}");
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
        // docs/contract.md §2 known answers, placed in different lanes of one batch.
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
