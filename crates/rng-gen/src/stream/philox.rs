//! Philox4x32-10, the counter-based engine behind every random number in ditto.
//!
//! This is the algorithm of Random123's `philox.h` (Salmon et al., "Parallel random
//! numbers: as easy as 1, 2, 3", SC'11), stated once for Rust. Its twin for CUDA is
//! `kernels/cuda/philox.cuh`; a test compiles that header for the host and checks the two
//! agree bit for bit.
//!
//! A counter-based generator has no hidden state: output block `b` under key `k` is
//! `philox(counter(b), k)`, so any element of any random tensor can be computed on its
//! own, in any order, on any thread or GPU. That is what makes ditto's results
//! independent of thread count and launch configuration.

/// Multiplier applied to counter word 0 in every round.
pub const PHILOX_M0: u32 = 0xD251_1F53;
/// Multiplier applied to counter word 2 in every round.
pub const PHILOX_M1: u32 = 0xCD9E_8D57;
/// Added to key word 0 between rounds (the golden ratio, as a Weyl sequence).
pub const PHILOX_W0: u32 = 0x9E37_79B9;
/// Added to key word 1 between rounds (sqrt(3) - 1).
pub const PHILOX_W1: u32 = 0xBB67_AE85;
/// Rounds of Philox4x32-10.
pub const PHILOX_ROUNDS: usize = 10;

/// The full 64-bit product of two 32-bit words, split as (high, low).
#[inline(always)]
fn mul_hi_lo(a: u32, b: u32) -> (u32, u32) {
    let product = u64::from(a) * u64::from(b);
    ((product >> 32) as u32, product as u32)
}

/// One Philox round: two multiplications mix words 0 and 2 into all four.
#[inline(always)]
fn round(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (hi0, lo0) = mul_hi_lo(PHILOX_M0, counter[0]);
    let (hi1, lo1) = mul_hi_lo(PHILOX_M1, counter[2]);
    [
        hi1 ^ counter[1] ^ key[0],
        lo1,
        hi0 ^ counter[3] ^ key[1],
        lo0,
    ]
}

/// Philox4x32-10: ten rounds on `counter` under `key`, bumping the key between rounds.
///
/// ```
/// use rng_gen::philox4x32_10;
/// assert_eq!(
///     philox4x32_10([0; 4], [0; 2]),
///     [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8],
/// );
/// ```
#[must_use]
#[inline]
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut counter = counter;
    let mut key = key;
    for r in 0..PHILOX_ROUNDS {
        if r > 0 {
            key = [
                key[0].wrapping_add(PHILOX_W0),
                key[1].wrapping_add(PHILOX_W1),
            ];
        }
        counter = round(counter, key);
    }
    counter
}

/// The four words of block `block` of the stream keyed by `seed` (DESIGN.md §1:
/// key `(seed lo, seed hi)`, counter `(block lo, block hi, 0, 0)`).
#[must_use]
#[inline]
pub fn block_words(seed: u64, block: u64) -> [u32; 4] {
    philox4x32_10(
        [block as u32, (block >> 32) as u32, 0, 0],
        [seed as u32, (seed >> 32) as u32],
    )
}

/// Word `word` of an op whose reserved base block is `base`: lane `word % 4` of block
/// `base + word / 4`. Block numbers wrap modulo 2^64, like the 64-bit counter they are.
#[must_use]
#[inline]
pub fn word_at(seed: u64, base: u64, word: u64) -> u32 {
    block_words(seed, base.wrapping_add(word / 4))[(word % 4) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The known answers from Random123's kat_vectors, as listed in DESIGN.md §1.
    #[test]
    fn known_answers() {
        let cases: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
            (
                [0; 4],
                [0; 2],
                [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8],
            ),
            (
                [u32::MAX; 4],
                [u32::MAX; 2],
                [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
            ),
            (
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0],
                [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
            ),
        ];
        for (counter, key, expected) in cases {
            assert_eq!(
                philox4x32_10(counter, key),
                expected,
                "counter {counter:x?}"
            );
        }
    }

    #[test]
    fn word_layout_follows_blocks() {
        let seed = 0x1234_5678_9abc_def0;
        let block = block_words(seed, 7);
        for lane in 0..4 {
            assert_eq!(word_at(seed, 5, 8 + lane), block[lane as usize]);
        }
        // The block counter wraps like a 64-bit integer.
        assert_eq!(word_at(seed, u64::MAX, 4), block_words(seed, 0)[0]);
    }
}
