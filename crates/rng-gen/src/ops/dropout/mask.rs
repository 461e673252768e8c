//! Dropout's keep-mask, packed one bit per element (bit `i % 32` of word `i / 32`, the
//! layout of `kernels::mask`, which the CUDA kernels write and read), and its application
//! to a slice. Forward and backward share both, so backward sees the forward mask bit
//! for bit whether it regenerates it or reads the saved one.

use tensor_core::Element;

use super::super::cpu_fill::{for_each_chunk, CHUNK_WORDS, PAR_MIN_ELEMS};
use crate::simd::with_widest_simd;
use crate::RngError;

/// Elements per mask word.
pub(crate) const MASK_BITS: usize = 32;

/// Mask words for `n` elements.
pub(crate) fn mask_len(n: usize) -> usize {
    kernels::packed_mask_words(n as u64) as usize
}

/// A mask with every element of `n` kept (trailing bits zero).
pub(crate) fn all_kept(n: usize) -> Result<Vec<u32>, RngError> {
    let mut mask = tensor_core::try_zeroed_vec::<u32>(mask_len(n))?;
    mask.fill(u32::MAX);
    clear_tail(&mut mask, n);
    Ok(mask)
}

/// Zeroes the bits past element `n - 1`, so masks compare equal however built.
pub(crate) fn clear_tail(mask: &mut [u32], n: usize) {
    let used = n % MASK_BITS;
    if used != 0 {
        if let Some(last) = mask.last_mut() {
            *last &= (1u32 << used) - 1;
        }
    }
}

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

/// `kept(x[i])` where bit `i` of `mask` is set, else `zero`, in parallel by chunks,
/// into a new vector.
pub(crate) fn apply<T: Element>(
    x: &[T],
    mask: &[u32],
    zero: T,
    kept: impl Fn(T) -> T + Sync,
) -> Result<Vec<T>, RngError> {
    debug_assert_eq!(mask.len(), mask_len(x.len()));
    let mut out = tensor_core::try_zeroed_vec::<T>(x.len())?;
    for_each_chunk(&mut out, CHUNK_WORDS, PAR_MIN_ELEMS, |chunk_index, out| {
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
