//! Philox4x32-10, the counter-based engine behind every random number in ditto.
//!
//! This is the algorithm of Random123's `philox.h` (Salmon et al., "Parallel random
//! numbers: as easy as 1, 2, 3", SC'11), stated once for Rust: one round function, run
//! on one counter (the scalar engine) or many (the CPU samplers' batches). Its twin for
//! CUDA is `crates/kernels/cuda/philox.cuh`; a test compiles that header for the host and checks
//! the two agree bit for bit.
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

/// The low 32 bits of a `u64`.
const LO: u64 = 0xFFFF_FFFF;

/// One Philox round on `N` counters at once, in place: `hi0:lo0 = M0 * c0`,
/// `hi1:lo1 = M1 * c2`, new counter `(hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)`.
///
/// Each 32-bit word sits in the low half of a `u64` lane. The high half may hold
/// garbage (the high word of the product that made it): only low halves are ever read,
/// by the next multiply (`& LO`) and by the final truncation. That is exactly the shape
/// of x86's `pmuludq` (32x32 -> 64-bit products of the low halves of 64-bit lanes), so
/// LLVM vectorises the loop over counters with no masking or packing between rounds;
/// with `N = 1` it is plain scalar code. Integer arithmetic only: vectorisation cannot
/// change a bit.
#[inline(always)]
fn round<const N: usize>(c: &mut [[u64; N]; 4], k0: u64, k1: u64) {
    let [c0, c1, c2, c3] = c;
    for j in 0..N {
        let product0 = u64::from(PHILOX_M0) * (c0[j] & LO);
        let product1 = u64::from(PHILOX_M1) * (c2[j] & LO);
        let (old1, old3) = (c1[j], c3[j]);
        c0[j] = (product1 >> 32) ^ old1 ^ k0;
        c1[j] = product1; // lo1 in the low half
        c2[j] = (product0 >> 32) ^ old3 ^ k1;
        c3[j] = product0; // lo0 in the low half
    }
}

/// Philox4x32-10 on `N` counters under one key (`counters[l][j]`: word `l` of counter
/// `j`): output `[l][j]` is word `l` of the ten-round result for counter `j`.
///
/// The one statement of the engine in Rust: [`philox4x32_10`] is its one-counter case,
/// and the CPU samplers run it on [`BATCH_BLOCKS`](super::philox_batch::BATCH_BLOCKS)
/// counters at a time (`philox_batch.rs`), where the loop over counters becomes vector
/// instructions.
#[must_use]
#[inline(always)]
pub fn philox4x32_10_lanes<const N: usize>(
    counters: &[[u32; N]; 4],
    key: [u32; 2],
) -> [[u32; N]; 4] {
    let mut c = [[0u64; N]; 4];
    for (wide, lane) in c.iter_mut().zip(counters) {
        for (w, &word) in wide.iter_mut().zip(lane) {
            *w = u64::from(word);
        }
    }
    // The key schedule: round r uses key + r * (W0, W1). The ten rounds are written out
    // (a loop LLVM leaves rolled costs a register shuffle per round).
    let keys: [[u64; 2]; PHILOX_ROUNDS] = std::array::from_fn(|r| {
        let r = r as u32;
        [
            u64::from(key[0].wrapping_add(PHILOX_W0.wrapping_mul(r))),
            u64::from(key[1].wrapping_add(PHILOX_W1.wrapping_mul(r))),
        ]
    });
    macro_rules! rounds {
        ($($r:literal)*) => {$( round(&mut c, keys[$r][0], keys[$r][1]); )*};
    }
    rounds!(0 1 2 3 4 5 6 7 8 9);
    let mut out = [[0u32; N]; 4];
    for (lane, wide) in out.iter_mut().zip(&c) {
        for (word, &w) in lane.iter_mut().zip(wide) {
            *word = w as u32;
        }
    }
    out
}

/// Philox4x32-10: ten rounds on `counter` under `key`, bumping the key between rounds
/// (the one-counter case of [`philox4x32_10_lanes`]).
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
    philox4x32_10_lanes::<1>(&counter.map(|w| [w]), key).map(|[w]| w)
}

/// The four words of block `block` of the stream keyed by `seed` (docs/contract.md §3:
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

    /// The known answers from Random123's kat_vectors, as listed in docs/contract.md §2.
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
