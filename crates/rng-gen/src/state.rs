//! Generator state bytes (docs/contract.md §8): what `get_state` returns and `set_state`
//! reads.
//!
//! Why bytes and not a struct? Checkpoints store them next to the weights, possibly for
//! years, and a run resumed from them must continue the exact stream. So the format is
//! fixed, little-endian, self-describing and versioned, and anything that does not
//! match is refused with a typed error rather than silently giving another stream.
//! The device is *not* part of a state: a state taken from a CPU generator can be set on
//! a CUDA generator (and back) and continues the same stream.
//!
//! # Layout, version 1
//!
//! | bytes   | field     | type      | meaning                                          |
//! |---------|-----------|-----------|--------------------------------------------------|
//! | 0..5    | magic     | `[u8; 5]` | `b"DTRNG"`                                       |
//! | 5..7    | version   | u16 LE    | `1`                                              |
//! | 7       | kind      | u8        | `1` = [`Generator`], `2` = [`PhiloxRng`]         |
//! | 8..16   | seed      | u64 LE    | the Philox key                                   |
//! | 16..24  | offset    | u64 LE    | Generator: next unused block. PhiloxRng: the block being read |
//! | 24      | lane      | u8        | PhiloxRng only: next lane to read, 0..=4 (4 = block used up) |
//! | 25..28  | reserved  | `[u8; 3]` | PhiloxRng only: zero                             |
//! | 28..44  | block     | 4 x u32 LE| PhiloxRng only: the words of block `offset` (checked on load) |
//! | last 4  | crc       | u32 LE    | CRC-32 (IEEE) of all preceding bytes             |
//!
//! A Generator state is [`GENERATOR_STATE_LEN`] = 28 bytes, a PhiloxRng state
//! [`WORD_RNG_STATE_LEN`] = 48 bytes. Loading checks, in order: the length covers the
//! header, the magic, the version, the kind, the exact length, the CRC, and (PhiloxRng)
//! that the stored block matches the one Philox computes.
//!
//! [`Generator`]: crate::Generator
//! [`PhiloxRng`]: crate::PhiloxRng

use crate::stream::key::Key;
use crate::RngError;

/// The first five bytes of every state.
pub const STATE_MAGIC: [u8; 5] = *b"DTRNG";
/// The format version written by this build, and the only one it reads.
pub const STATE_VERSION: u16 = 1;
/// Length of a [`Generator`](crate::Generator) state.
pub const GENERATOR_STATE_LEN: usize = 28;
/// Length of a [`PhiloxRng`](crate::PhiloxRng) state.
pub const WORD_RNG_STATE_LEN: usize = 48;

/// Bytes before the kind-specific part: magic, version, kind, seed, offset.
const HEADER_LEN: usize = 24;

/// Which object a state belongs to (byte 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum StateKind {
    /// A [`Generator`](crate::Generator): seed and offset.
    Generator = 1,
    /// A word-level [`PhiloxRng`](crate::PhiloxRng): seed, block and lane.
    WordRng = 2,
}

impl StateKind {
    fn len(self) -> usize {
        match self {
            StateKind::Generator => GENERATOR_STATE_LEN,
            StateKind::WordRng => WORD_RNG_STATE_LEN,
        }
    }
}

/// The word-level extra of a PhiloxRng state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WordPosition {
    /// Next lane to read, 0..=4.
    pub lane: u8,
    /// The words of the block being read.
    pub block: [u32; 4],
}

/// Writes a state of `kind`; `position` must be `Some` exactly for `WordRng`.
pub(crate) fn encode(kind: StateKind, key: Key, position: Option<WordPosition>) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(kind.len());
    bytes.extend_from_slice(&STATE_MAGIC);
    bytes.extend_from_slice(&STATE_VERSION.to_le_bytes());
    bytes.push(kind as u8);
    bytes.extend_from_slice(&key.seed.to_le_bytes());
    bytes.extend_from_slice(&key.offset.to_le_bytes());
    if let Some(position) = position {
        bytes.push(position.lane);
        bytes.extend_from_slice(&[0; 3]);
        for word in position.block {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
    }
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(bytes.len(), kind.len());
    bytes
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// Reads a state of `kind`, validating it; returns the key and (for `WordRng`) the
/// position. Does not check the stored block against Philox; the caller does.
pub(crate) fn decode(
    kind: StateKind,
    bytes: &[u8],
) -> Result<(Key, Option<WordPosition>), RngError> {
    let expected = kind.len();
    let wrong_length = || RngError::WrongLength {
        expected,
        got: bytes.len(),
    };
    if bytes.len() < 8 {
        // Too short to tell what it is; say so before guessing at the magic.
        if !STATE_MAGIC.starts_with(&bytes[..bytes.len().min(5)]) {
            return Err(RngError::BadMagic {
                found: bytes.to_vec(),
            });
        }
        return Err(wrong_length());
    }
    if bytes[..5] != STATE_MAGIC {
        return Err(RngError::BadMagic {
            found: bytes[..5].to_vec(),
        });
    }
    let version = u16::from_le_bytes([bytes[5], bytes[6]]);
    if version != STATE_VERSION {
        return Err(RngError::UnsupportedVersion {
            found: version,
            supported: STATE_VERSION,
        });
    }
    if bytes[7] != kind as u8 {
        return Err(RngError::WrongStateKind {
            expected: kind as u8,
            found: bytes[7],
        });
    }
    if bytes.len() != expected {
        return Err(wrong_length());
    }
    let body = &bytes[..expected - 4];
    let found = u32_at(bytes, expected - 4);
    let computed = crc32fast::hash(body);
    if found != computed {
        return Err(RngError::ChecksumMismatch { found, computed });
    }
    let key = Key {
        seed: u64_at(bytes, 8),
        offset: u64_at(bytes, 16),
    };
    let position = match kind {
        StateKind::Generator => None,
        StateKind::WordRng => {
            let lane = bytes[HEADER_LEN];
            if lane > 4 {
                return Err(RngError::InconsistentState {
                    reason: "lane must be in 0..=4",
                });
            }
            if bytes[HEADER_LEN + 1..HEADER_LEN + 4] != [0; 3] {
                return Err(RngError::InconsistentState {
                    reason: "reserved bytes must be zero",
                });
            }
            let block = std::array::from_fn(|i| u32_at(bytes, HEADER_LEN + 4 + 4 * i));
            Some(WordPosition { lane, block })
        }
    };
    Ok((key, position))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generator_state_round_trips() {
        let key = Key {
            seed: 0x0123_4567_89ab_cdef,
            offset: u64::MAX - 3,
        };
        let bytes = encode(StateKind::Generator, key, None);
        assert_eq!(bytes.len(), GENERATOR_STATE_LEN);
        assert_eq!(&bytes[..8], b"DTRNG\x01\x00\x01");
        assert_eq!(decode(StateKind::Generator, &bytes).unwrap(), (key, None));
        assert!(matches!(
            decode(StateKind::WordRng, &bytes),
            Err(RngError::WrongStateKind {
                expected: 2,
                found: 1
            })
        ));
        let mut flipped = bytes.clone();
        flipped[9] ^= 1;
        assert!(matches!(
            decode(StateKind::Generator, &flipped),
            Err(RngError::ChecksumMismatch { .. })
        ));
        assert!(matches!(
            decode(StateKind::Generator, b"DTR"),
            Err(RngError::WrongLength {
                expected: 28,
                got: 3
            })
        ));
        assert!(matches!(
            decode(StateKind::Generator, b"xy"),
            Err(RngError::BadMagic { .. })
        ));
    }
}
