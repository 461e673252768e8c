//! The checksums of the checkpoint format: SHA-256 (version 2) and the legacy CRC-32
//! (version 1), both over one canonical encoding of the checkpoint's contents.
//!
//! # The canonical encoding
//!
//! Each string or byte run is written as its length (u64 LE) followed by its bytes
//! (`put`); counts and dims are u64 LE. In this order:
//!
//! ```text
//! [count of metadata pairs]            (version 2 only)
//! for each metadata pair except ditto.checksum, in key order:  put(key) put(value)
//! [count of tensors]                   (version 2 only)
//! for each tensor, in name order:
//!     put(name) put(dtype name) put([rank, dim 0, dim 1, ...] as u64 LE) put(data bytes)
//! ```
//!
//! Every item carries its length and every list its count, so the encoding can be read
//! back unambiguously: two different contents never encode to the same bytes, and no
//! concatenation trick (moving bytes from one value into the next) keeps the encoding.
//! The format name and version are metadata pairs, so they are covered too.
//!
//! # Why SHA-256 and not CRC-32
//!
//! CRC is linear over GF(2): the CRC of a message is a fixed function of the XOR of its
//! pieces. Generator and loader states end in their own CRC-32, and a block that ends in
//! its own CRC contributes a constant (its "residue") to any outer CRC computed over it.
//! So version 1's outer CRC-32 saw only the *lengths* of those blobs: swapping the two
//! 28-byte generator states, or splicing in a loader state from another checkpoint of
//! the same run, kept the checksum and loaded. SHA-256 has no such structure: any
//! change, swap or splice changes the digest except with probability 2^-256. It is
//! slower than CRC-32 or XXH3 (about 0.5 to 2 GB/s on one core, against a checkpoint
//! write that also fsyncs), well understood, and available in the `sha2` crate with no
//! unsafe code of ours. It is a checksum against accidents and tools, not a signature:
//! anyone who can edit the file can also recompute the digest.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// Metadata key holding the checksum: `sha256:` and 64 lowercase hex digits (version 2),
/// `crc32:` and 8 (version 1). It lives here, not in `format.rs`, because the digest is
/// computed over every metadata pair but this one; the format imports it from here.
pub const CHECKSUM_KEY: &str = "ditto.checksum";

/// One tensor as the checksums see it: name, safetensors dtype name, dims, data bytes.
pub(crate) type Entry<'a> = (&'a str, &'a str, &'a [usize], &'a [u8]);

/// Feeds the canonical encoding of `metadata` and `tensors` to `sink`; `counted` adds
/// the two counts (version 2). Metadata is already in key order (a `BTreeMap`); tensors
/// are sorted by name here.
fn encode_canonical<'a>(
    metadata: &BTreeMap<String, String>,
    tensors: impl IntoIterator<Item = Entry<'a>>,
    counted: bool,
    sink: &mut dyn FnMut(&[u8]),
) {
    let mut put = |bytes: &[u8]| {
        sink(&(bytes.len() as u64).to_le_bytes());
        sink(bytes);
    };
    let pairs: Vec<(&String, &String)> = metadata
        .iter()
        .filter(|(k, _)| *k != CHECKSUM_KEY)
        .collect();
    if counted {
        put(&(pairs.len() as u64).to_le_bytes());
    }
    for (key, value) in pairs {
        put(key.as_bytes());
        put(value.as_bytes());
    }
    let mut sorted: Vec<Entry<'a>> = tensors.into_iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    if counted {
        put(&(sorted.len() as u64).to_le_bytes());
    }
    for (name, dtype, dims, data) in sorted {
        put(name.as_bytes());
        put(dtype.as_bytes());
        let shape: Vec<u8> = std::iter::once(dims.len() as u64)
            .chain(dims.iter().map(|&d| d as u64))
            .flat_map(u64::to_le_bytes)
            .collect();
        put(&shape);
        put(data);
    }
}

/// The version-2 checksum value: `sha256:` and 64 lowercase hex digits.
pub(crate) fn sha256_checksum<'a>(
    metadata: &BTreeMap<String, String>,
    tensors: impl IntoIterator<Item = Entry<'a>>,
) -> String {
    let mut hasher = Sha256::new();
    encode_canonical(metadata, tensors, true, &mut |bytes| hasher.update(bytes));
    let digest: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{SHA256_PREFIX}{digest}")
}

/// The version-1 checksum value: `crc32:` and 8 lowercase hex digits. Read-only: ditto
/// no longer writes version 1 (see the module docs for why it was too weak).
pub(crate) fn crc32_checksum<'a>(
    metadata: &BTreeMap<String, String>,
    tensors: impl IntoIterator<Item = Entry<'a>>,
) -> String {
    let mut hasher = crc32fast::Hasher::new();
    encode_canonical(metadata, tensors, false, &mut |bytes| hasher.update(bytes));
    format!("{CRC32_PREFIX}{:08x}", hasher.finalize())
}

/// Prefix of a version-2 checksum value.
pub(crate) const SHA256_PREFIX: &str = "sha256:";
/// Prefix of a version-1 checksum value.
pub(crate) const CRC32_PREFIX: &str = "crc32:";

/// True when `value` is `prefix` followed by exactly `digits` lowercase hex digits.
/// Lowercase only: accepting "D" for "d" would let a flipped case bit pass.
pub(crate) fn is_well_formed(value: &str, prefix: &str, digits: usize) -> bool {
    value.strip_prefix(prefix).is_some_and(|hex| {
        hex.len() == digits && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn moving_bytes_between_neighbours_changes_the_digest() {
        let m = meta(&[("a", "bc")]);
        let shifted = meta(&[("ab", "c")]);
        assert_ne!(sha256_checksum(&m, []), sha256_checksum(&shifted, []));
        let one: [Entry; 1] = [("x", "U8", &[2], &[1, 2])];
        let two: [Entry; 2] = [("x", "U8", &[1], &[1]), ("y", "U8", &[1], &[2])];
        assert_ne!(sha256_checksum(&m, one), sha256_checksum(&m, two));
    }

    /// The flaw that retired version 1: two blobs that each end in their own CRC-32
    /// can be swapped without changing the outer CRC-32; SHA-256 sees the swap.
    #[test]
    fn swapping_self_checksummed_blobs_fools_crc32_but_not_sha256() {
        let blob = |seed: u8| {
            let mut b: Vec<u8> = (0..24)
                .map(|i| seed.wrapping_mul(31).wrapping_add(i))
                .collect();
            let crc = crc32fast::hash(&b);
            b.extend_from_slice(&crc.to_le_bytes());
            b
        };
        let (p, q) = (blob(1), blob(2));
        let m = meta(&[]);
        let a: [Entry; 2] = [("rng.a", "U8", &[28], &p), ("rng.b", "U8", &[28], &q)];
        let b: [Entry; 2] = [("rng.a", "U8", &[28], &q), ("rng.b", "U8", &[28], &p)];
        assert_eq!(crc32_checksum(&m, a), crc32_checksum(&m, b));
        assert_ne!(sha256_checksum(&m, a), sha256_checksum(&m, b));
    }

    #[test]
    fn well_formed_checks_prefix_length_and_case() {
        assert!(is_well_formed("crc32:0a1b2c3d", CRC32_PREFIX, 8));
        assert!(!is_well_formed("crc32:0A1B2C3D", CRC32_PREFIX, 8));
        assert!(!is_well_formed("crc32:0a1b2c3", CRC32_PREFIX, 8));
        assert!(!is_well_formed("sha256:0a1b2c3d", CRC32_PREFIX, 8));
    }
}
