//! Dropout's keep-mask, packed one bit per element (bit `i % 32` of word `i / 32`), and
//! its application to a slice. Forward and backward share both, so backward sees the
//! forward mask bit for bit whether it regenerates it or reads the saved one.

use rayon::prelude::*;
use tensor_core::Element;

use super::args::alloc;
use super::fill::{fill, Layout, CHUNK_WORDS};
use crate::stream::convert::dropout_keep;
use crate::stream::key::Key;
use crate::RngError;

/// Elements per mask word.
pub(crate) const MASK_BITS: usize = 32;

/// Mask words for `n` elements (the layout of `kernels::mask`, shared with the CUDA
/// kernels).
pub(crate) fn mask_len(n: usize) -> usize {
    kernels::packed_mask_words(n as u64) as usize
}

/// A mask with every element of `n` kept (trailing bits zero).
pub(crate) fn all_kept(n: usize) -> Result<Vec<u32>, RngError> {
    let mut mask = alloc(mask_len(n), u32::MAX)?;
    clear_tail(&mut mask, n);
    Ok(mask)
}

/// Zeroes the bits past element `n - 1`, so masks compare equal however built.
fn clear_tail(mask: &mut [u32], n: usize) {
    let used = n % MASK_BITS;
    if used != 0 {
        if let Some(last) = mask.last_mut() {
            *last &= (1u32 << used) - 1;
        }
    }
}

/// The keep-mask of dropout with probability `p` on `n` elements at `key`: bit `i` set
/// iff `dropout_keep(word i, p)`. One mask word per 32 stream words, in parallel.
pub(crate) fn keep_mask(key: Key, n: usize, p: f32) -> Result<Vec<u32>, RngError> {
    let mut mask = alloc(mask_len(n), 0u32)?;
    // Words past element n - 1 in the last mask word are computed but their bits cleared.
    fill(
        &mut mask,
        key,
        Layout::per_element(MASK_BITS),
        |_, words, out| {
            let mut bits = 0u32;
            for (b, &word) in words.iter().enumerate() {
                bits |= u32::from(dropout_keep(word, p)) << b;
            }
            out[0] = bits;
        },
    );
    clear_tail(&mut mask, n);
    Ok(mask)
}

/// `kept(x[i])` where bit `i` of `mask` is set, else `zero`, in parallel by chunks.
pub(crate) fn apply<T: Element>(
    x: &[T],
    mask: &[u32],
    zero: T,
    kept: impl Fn(T) -> T + Sync,
) -> Result<Vec<T>, RngError> {
    debug_assert_eq!(mask.len(), mask_len(x.len()));
    let mut out = alloc(x.len(), zero)?;
    let run = |(chunk_index, (out, x)): (usize, (&mut [T], &[T]))| {
        let first = chunk_index * CHUNK_WORDS;
        for (j, (o, &v)) in out.iter_mut().zip(x).enumerate() {
            let i = first + j;
            if mask[i / MASK_BITS] >> (i % MASK_BITS) & 1 == 1 {
                *o = kept(v);
            }
        }
    };
    if x.len() <= CHUNK_WORDS {
        run((0, (&mut out, x)));
    } else {
        out.par_chunks_mut(CHUNK_WORDS)
            .zip(x.par_chunks(CHUNK_WORDS))
            .enumerate()
            .for_each(run);
    }
    Ok(out)
}
