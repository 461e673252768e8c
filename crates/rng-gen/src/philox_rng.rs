//! `PhiloxRng`: ditto's stream as a word-level `rand_core` RNG, for code written
//! against the `rand` ecosystem (shuffles, samplers, third-party crates).

use rand_core::{RngCore, SeedableRng};

use crate::state::{self, StateKind, WordPosition};
use crate::stream::key::{fold_in, Key};
use crate::stream::philox::block_words;
use crate::{Generator, RngError};

/// The stream of a [`Key`], one 32-bit word at a time, in the order of
/// docs/contract.md §3: word `w` is lane `w % 4` of block `offset + w / 4`. So
/// `PhiloxRng::from_key(k)` yields exactly the words `bits` would fill a tensor with from
/// the same key.
///
/// - [`next_u32`](RngCore::next_u32): the next word.
/// - [`next_u64`](RngCore::next_u64): two words, the first as the low half, the second
///   as the high half.
/// - [`fill_bytes`](RngCore::fill_bytes): words in order, each written little-endian; a
///   final partial chunk of 1..3 bytes uses the low bytes of one whole word, and the
///   rest of that word is discarded.
///
/// Its state, including the position inside the current block, round-trips through
/// [`to_bytes`](Self::to_bytes) / [`from_bytes`](Self::from_bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhiloxRng {
    seed: u64,
    /// Block number of `words`.
    block: u64,
    /// The words of `block`, computed once per four words.
    words: [u32; 4],
    /// Next lane of `words` to hand out; 4 = used up, the next read moves to `block + 1`.
    lane: u8,
}

impl PhiloxRng {
    /// The stream starting at `key`: first word = lane 0 of block `key.offset`.
    #[must_use]
    pub fn from_key(key: Key) -> Self {
        PhiloxRng {
            seed: key.seed,
            block: key.offset,
            words: block_words(key.seed, key.offset),
            lane: 0,
        }
    }

    /// A stream of its own, driven by `generator`: reserves one block and derives a fresh
    /// key from it with [`fold_in`] (`fold_in(reserved, 0)`). The generator advances by
    /// exactly 1 however many words are drawn, and the words never overlap with the
    /// generator's later ops (they come from another key).
    #[must_use]
    pub fn from_generator(generator: &Generator) -> Self {
        PhiloxRng::from_key(fold_in(generator.reserve_blocks(1), 0))
    }

    /// The Philox key (seed) of the stream.
    #[must_use]
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The position: the block being read and the next lane (0..=4) in it. The next word
    /// is word `lane` of block `block` (or lane 0 of `block + 1` when `lane == 4`).
    #[must_use]
    pub fn position(&self) -> (u64, u8) {
        (self.block, self.lane)
    }

    /// The state as versioned bytes ([`crate::state`], kind 2), position included.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        state::encode(
            StateKind::WordRng,
            Key {
                seed: self.seed,
                offset: self.block,
            },
            Some(WordPosition {
                lane: self.lane,
                block: self.words,
            }),
        )
    }

    /// Restores a state from [`to_bytes`](Self::to_bytes); the next word is the one the
    /// saved RNG would have produced next. Checks length, magic, version, kind, CRC, and
    /// that the stored block is the one Philox gives for that seed and block.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, RngError> {
        let (key, position) = state::decode(StateKind::WordRng, bytes)?;
        let position = position.expect("word-level states carry a position");
        let rng = PhiloxRng {
            seed: key.seed,
            block: key.offset,
            words: block_words(key.seed, key.offset),
            lane: position.lane,
        };
        if rng.words != position.block {
            return Err(RngError::InconsistentState {
                reason: "stored block words do not match the seed and block",
            });
        }
        Ok(rng)
    }
}

impl RngCore for PhiloxRng {
    fn next_u32(&mut self) -> u32 {
        if self.lane == 4 {
            self.block = self.block.wrapping_add(1);
            self.words = block_words(self.seed, self.block);
            self.lane = 0;
        }
        let word = self.words[usize::from(self.lane)];
        self.lane += 1;
        word
    }

    fn next_u64(&mut self) -> u64 {
        let lo = self.next_u32();
        let hi = self.next_u32();
        u64::from(hi) << 32 | u64::from(lo)
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        let mut chunks = dst.chunks_exact_mut(4);
        for chunk in &mut chunks {
            chunk.copy_from_slice(&self.next_u32().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let word = self.next_u32().to_le_bytes();
            rest.copy_from_slice(&word[..rest.len()]);
        }
    }
}

impl SeedableRng for PhiloxRng {
    /// `seed` as u64 little-endian, then `offset` as u64 little-endian: a [`Key`].
    type Seed = [u8; 16];

    fn from_seed(seed: Self::Seed) -> Self {
        let (s, o) = seed.split_at(8);
        PhiloxRng::from_key(Key {
            seed: u64::from_le_bytes(s.try_into().expect("8 bytes")),
            offset: u64::from_le_bytes(o.try_into().expect("8 bytes")),
        })
    }

    /// `Key { seed: state, offset: 0 }` (PyTorch's `key(seed)`), not rand_core's
    /// PCG-expanded default, so `seed_from_u64(s)` matches a generator seeded with `s`.
    fn seed_from_u64(state: u64) -> Self {
        PhiloxRng::from_key(Key::new(state))
    }
}
