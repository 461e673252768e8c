//! Samplers whose element `i` is a function of word `i` alone: `rand` / `uniform` in
//! f32, f16 and bf16, `bernoulli`, and `bits`.
//!
//! Their [`Sampler`] impls would be the same five methods each time (one word per
//! element, the scalar body on one word, the batch body as a loop over the batch, the
//! name, the kernel); they state only what differs, [`PerWordSampler::element`], and get the
//! rest here, so the batch body and the scalar body cannot drift apart. It is public:
//! a downstream op with one word per element implements it the same way.

use tensor_core::Element;

use super::sampler::{Layout, Sampler, BATCH_WORDS};

/// A sampler with one word per element and element `i` = `element(word i)`; every
/// such type is a [`Sampler`] with `Layout::per_element(1)`.
pub trait PerWordSampler: Sync {
    /// The element type written.
    type Elem: Element;
    /// The op's name, for errors and traces.
    fn name(&self) -> &'static str;
    /// The element of one word: the op's whole definition.
    fn element(&self, word: u32) -> Self::Elem;
    /// The kernel computing the same elements (see [`Sampler::cuda_kernel`]).
    #[cfg(feature = "cuda")]
    fn cuda_kernel(&mut self) -> kernels::Result<Option<kernels::KernelCall<'_>>>;
}

impl<S: PerWordSampler> Sampler for S {
    type Elem = S::Elem;
    fn name(&self) -> &'static str {
        PerWordSampler::name(self)
    }
    fn layout(&self) -> Layout {
        Layout::per_element(1)
    }
    fn fill_group(&self, _group: u64, words: &[u32], out: &mut [S::Elem]) {
        out[0] = self.element(words[0]);
    }
    #[inline(always)]
    fn fill_batch(&self, _first: u64, words: &[u32; BATCH_WORDS], out: &mut [S::Elem]) {
        for (o, &w) in out.iter_mut().zip(words) {
            *o = self.element(w);
        }
    }
    #[cfg(feature = "cuda")]
    fn cuda_kernel(&mut self) -> kernels::Result<Option<kernels::KernelCall<'_>>> {
        PerWordSampler::cuda_kernel(self)
    }
}
