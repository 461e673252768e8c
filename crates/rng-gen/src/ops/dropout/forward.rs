//! Dropout forward as a sampler: one word per element, keep iff `u >= p`
//! (docs/contract.md §5.7), kept elements scaled, dropped ones `+0`, and optionally the
//! packed keep-mask.

use std::sync::atomic::{AtomicU32, Ordering};

use half::{bf16, f16};
use tensor_core::Element;

use super::mask::MASK_BITS;
use crate::ops::sampler::{Layout, Sampler, BATCH_WORDS};
use crate::ops::NarrowFloat;
use crate::stream::convert::dropout_keep;

/// The element types dropout takes, and how a kept element is scaled: in f32 for f32,
/// f16 and bf16 (then rounded once), in f64 for f64, as the CUDA kernels do
/// (`Out::kept` in `crates/kernels/cuda/random_blocks.cuh`).
pub(crate) trait DropoutFloat: Element {
    /// `self * scale`, rounded to `Self`.
    fn kept(self, scale: f32) -> Self;
    /// `+0`.
    fn zero() -> Self;
}

macro_rules! narrow_dropout_float {
    ($($t:ty),*) => {$(
        impl DropoutFloat for $t {
            #[inline(always)]
            fn kept(self, scale: f32) -> Self {
                <$t as NarrowFloat>::round_from_f32(NarrowFloat::to_f32(self) * scale)
            }
            #[inline(always)]
            fn zero() -> Self {
                <$t as NarrowFloat>::round_from_f32(0.0)
            }
        }
    )*};
}
narrow_dropout_float!(f32, f16, bf16);

impl DropoutFloat for f64 {
    #[inline(always)]
    fn kept(self, scale: f32) -> Self {
        self * f64::from(scale)
    }
    #[inline(always)]
    fn zero() -> Self {
        0.0
    }
}

/// Where the packed keep-mask goes, if anywhere.
pub(crate) enum MaskOut<'a> {
    /// Not wanted.
    None,
    /// CPU words, zeroed, written with relaxed stores: each word belongs to the chunk
    /// holding its 32 elements, so no two threads write one word.
    Cpu(&'a [AtomicU32]),
    /// A device buffer of `packed_mask_words(n)` u32, which the kernel writes.
    #[cfg(feature = "cuda")]
    Cuda(&'a mut tensor_core::cuda::CudaStorage),
}

/// `dropout(x)` at probability `p` with `scale = 1 / (1 - p)` (computed once, on the
/// host). Also the regenerating backward: the same sampler on the gradient at the
/// forward's key.
pub(crate) struct DropoutForward<'a, T> {
    pub(crate) op: &'static str,
    /// The input's elements on the CPU (empty for a CUDA input).
    pub(crate) x: &'a [T],
    /// The input's device buffer and the element its contiguous view starts at.
    #[cfg(feature = "cuda")]
    pub(crate) x_cuda: Option<(&'a tensor_core::cuda::CudaStorage, usize)>,
    pub(crate) p: f32,
    pub(crate) scale: f32,
    pub(crate) mask: MaskOut<'a>,
}

impl<T: DropoutFloat> DropoutForward<'_, T> {
    #[inline(always)]
    fn element(&self, word: u32, x: T) -> T {
        let scaled = x.kept(self.scale);
        if dropout_keep(word, self.p) {
            scaled
        } else {
            T::zero()
        }
    }
}

impl<T: DropoutFloat> Sampler for DropoutForward<'_, T> {
    type Elem = T;
    fn name(&self) -> &'static str {
        self.op
    }
    fn layout(&self) -> Layout {
        Layout::per_element(1)
    }
    fn fill_group(&self, i: u64, words: &[u32], out: &mut [T]) {
        let i = i as usize;
        out[0] = self.element(words[0], self.x[i]);
        if let MaskOut::Cpu(mask) = &self.mask {
            let bit = u32::from(dropout_keep(words[0], self.p)) << (i % MASK_BITS);
            mask[i / MASK_BITS].fetch_or(bit, Ordering::Relaxed);
        }
    }
    /// The element-wise select over fixed-size arrays (vector compares and blends), and
    /// the batch's four mask words packed the same way.
    #[inline(always)]
    fn fill_batch(&self, first: u64, words: &[u32; BATCH_WORDS], out: &mut [T]) {
        let first = first as usize;
        let x = &self.x[first..first + out.len()];
        for ((o, &v), &w) in out.iter_mut().zip(x).zip(words) {
            *o = self.element(w, v);
        }
        if let MaskOut::Cpu(mask) = &self.mask {
            let groups = words[..out.len()].chunks(MASK_BITS);
            for (m, group) in groups.enumerate() {
                let mut bits = 0u32;
                for (j, &w) in group.iter().enumerate() {
                    bits |= u32::from(dropout_keep(w, self.p)) << j;
                }
                mask[first / MASK_BITS + m].store(bits, Ordering::Relaxed);
            }
        }
    }
    #[cfg(feature = "cuda")]
    fn cuda_kernel(&mut self) -> kernels::Result<Option<kernels::KernelCall<'_>>> {
        let Some((x, at)) = self.x_cuda else {
            return Ok(None);
        };
        let mask = match &mut self.mask {
            MaskOut::Cuda(m) => Some(&mut **m),
            _ => None,
        };
        kernels::launch::dropout_call(x, at, mask, self.p, self.scale).map(Some)
    }
}
