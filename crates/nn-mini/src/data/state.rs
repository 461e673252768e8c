//! `LoaderState`: where a data loader is, as versioned bytes for checkpoints.

use rng_gen::Key;

use crate::{NnError, Result};

/// First bytes of every loader state.
const MAGIC: [u8; 4] = *b"DTLD";
/// The layout version this build writes and reads.
pub const LOADER_STATE_VERSION: u16 = 1;
/// Size of a version-1 state in bytes.
const LEN: usize = 4 + 2 + 1 + 1 + 6 * 8 + 4;

/// Everything needed to continue a loader exactly where it stopped, mid-epoch included,
/// without replaying the epoch: the key, the epoch and the next batch. The remaining
/// fields describe the loader it came from, so restoring into a loader over a different
/// dataset or batch size is an error instead of a silently different run.
///
/// `num_workers` is deliberately absent: batches do not depend on it, so a run may
/// resume with a different worker count.
///
/// Bytes (little-endian, [`LOADER_STATE_VERSION`] 1, 60 bytes): magic `DTLD`, version
/// u16, flags u8 (bit 0 shuffle, bit 1 drop_last), a zero byte, then u64 key seed, key
/// offset, epoch, position, dataset length, batch size, and a CRC-32 of everything
/// before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoaderState {
    /// The loader's root key (see [`crate::data`] for the derivation tree).
    pub key: Key,
    /// The epoch of the next batch.
    pub epoch: u64,
    /// Index of the next batch within `epoch`.
    pub position: u64,
    /// Length of the dataset the loader runs over.
    pub dataset_len: u64,
    /// The loader's batch size.
    pub batch_size: u64,
    /// Whether epochs are shuffled.
    pub shuffle: bool,
    /// Whether the last incomplete batch is dropped.
    pub drop_last: bool,
}

impl LoaderState {
    /// The state as versioned bytes.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(LEN);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&LOADER_STATE_VERSION.to_le_bytes());
        out.push(u8::from(self.shuffle) | u8::from(self.drop_last) << 1);
        out.push(0);
        for v in [
            self.key.seed,
            self.key.offset,
            self.epoch,
            self.position,
            self.dataset_len,
            self.batch_size,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses [`to_bytes`](Self::to_bytes) output; errors name what is wrong (length,
    /// magic, version, flags, checksum).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let bad = |reason: String| Err(NnError::InvalidLoaderState { reason });
        if bytes.len() < 6 || bytes[..4] != MAGIC {
            return bad(format!(
                "does not start with the magic {MAGIC:?} (got {} bytes)",
                bytes.len()
            ));
        }
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        if version != LOADER_STATE_VERSION {
            return bad(format!(
                "version {version} is not supported (this build reads version {LOADER_STATE_VERSION})"
            ));
        }
        if bytes.len() != LEN {
            return bad(format!("expected {LEN} bytes, got {}", bytes.len()));
        }
        let (body, crc) = bytes.split_at(LEN - 4);
        let stored = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
        let computed = crc32fast::hash(body);
        if stored != computed {
            return bad(format!(
                "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ));
        }
        let (flags, zero) = (body[6], body[7]);
        if flags > 0b11 || zero != 0 {
            return bad(format!("unknown flags {flags:#04x} / {zero:#04x}"));
        }
        let word =
            |i: usize| u64::from_le_bytes(body[8 + 8 * i..16 + 8 * i].try_into().expect("8 bytes"));
        Ok(LoaderState {
            key: Key {
                seed: word(0),
                offset: word(1),
            },
            epoch: word(2),
            position: word(3),
            dataset_len: word(4),
            batch_size: word(5),
            shuffle: flags & 1 != 0,
            drop_last: flags & 2 != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> LoaderState {
        LoaderState {
            key: Key {
                seed: 0x0123_4567_89ab_cdef,
                offset: 42,
            },
            epoch: 3,
            position: 17,
            dataset_len: 1000,
            batch_size: 32,
            shuffle: true,
            drop_last: false,
        }
    }

    #[test]
    fn round_trips() {
        let bytes = state().to_bytes();
        assert_eq!(bytes.len(), LEN);
        assert_eq!(LoaderState::from_bytes(&bytes).unwrap(), state());
    }

    #[test]
    fn every_single_bit_flip_and_truncation_is_rejected() {
        let bytes = state().to_bytes();
        for bit in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(
                matches!(
                    LoaderState::from_bytes(&flipped),
                    Err(NnError::InvalidLoaderState { .. })
                ),
                "bit {bit}"
            );
        }
        for len in 0..bytes.len() {
            assert!(LoaderState::from_bytes(&bytes[..len]).is_err(), "len {len}");
        }
    }
}
