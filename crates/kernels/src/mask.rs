//! The packed dropout mask: one bit per element, so a saved mask costs n / 8 bytes
//! instead of n (docs/contract.md §5.7: backward "never needs a byte per element").
//!
//! Element `i` is bit `i % 32` of 32-bit word `i / 32`; bits past `n` in the last word
//! are 0. The CUDA forward kernel writes this layout (one thread per word, no atomics)
//! and the backward kernel reads it; CPU code can build or read the same words.

/// Number of `u32` words in the packed mask of `n` elements: `ceil(n / 32)`.
#[must_use]
pub fn packed_mask_words(n: u64) -> u64 {
    n.div_ceil(32)
}

/// Whether element `i` is kept according to a packed mask.
///
/// # Panics
/// If `i / 32` is outside `mask`.
#[must_use]
pub fn mask_bit(mask: &[u32], i: u64) -> bool {
    let word = usize::try_from(i / 32).expect("mask index fits in usize");
    (mask[word] >> (i % 32)) & 1 == 1
}

/// Packs keep flags into the mask layout above.
#[must_use]
pub fn pack_mask(keep: &[bool]) -> Vec<u32> {
    keep.chunks(32)
        .map(|chunk| {
            chunk
                .iter()
                .enumerate()
                .fold(0u32, |w, (bit, &k)| w | (u32::from(k) << bit))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_and_read_back() {
        let keep: Vec<bool> = (0..70).map(|i| i % 3 == 0).collect();
        let mask = pack_mask(&keep);
        assert_eq!(mask.len() as u64, packed_mask_words(70));
        for (i, &k) in keep.iter().enumerate() {
            assert_eq!(mask_bit(&mask, i as u64), k);
        }
        assert_eq!(mask[2] >> 6, 0, "bits past n are zero");
    }
}
