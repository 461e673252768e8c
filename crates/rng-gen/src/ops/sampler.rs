//! [`Sampler`]: what a random op tells the pipeline, and all it needs to tell it.
//!
//! A sampler states an op the way docs/contract.md §5 does: how many consecutive words
//! each group of consecutive elements uses ([`Layout`]), and how a group's words become
//! its elements (the *body*). The pipeline (`ops/pipeline.rs`) does everything else, the
//! same way for ditto's own ops and for a downstream crate's: validation, taking the
//! output (a new tensor or an existing one), reserving `ceil(words / 4)` blocks once, and
//! the fill, in parallel and bit-identical for any thread count on the CPU, or as a
//! kernel launch on CUDA. `docs/custom-random-op.md` writes one from scratch.

use tensor_core::Element;

pub use crate::stream::philox_batch::BATCH_WORDS;

/// How an op's elements sit on the stream: every `elements` consecutive elements (a
/// *group*) use `words` consecutive words, group `g` words `g * words ..`. Group `g`'s
/// first element is element `g * elements`.
///
/// `words` must divide [`BATCH_WORDS`] (1, 2, 4, 8, 16, 32, 64 or 128), so a batch of
/// words never splits a group. An op on `n` elements consumes `ceil(n / elements) *
/// words` words: a last, partial group (the last normal of an odd count) still consumes
/// all its words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Elements per group (2 for Box-Muller pairs, else usually 1).
    pub elements: usize,
    /// Words per group.
    pub words: usize,
}

impl Layout {
    /// One element per `words` words.
    #[must_use]
    pub const fn per_element(words: usize) -> Self {
        Layout { elements: 1, words }
    }

    /// `elements` elements per `words` words.
    #[must_use]
    pub const fn groups(elements: usize, words: usize) -> Self {
        Layout { elements, words }
    }

    /// Words an op on `n` elements consumes: `ceil(n / elements) * words`.
    #[must_use]
    pub fn words_for(self, n: u64) -> u128 {
        u128::from(n.div_ceil(self.elements.max(1) as u64)) * self.words as u128
    }

    /// Groups in a batch of [`BATCH_WORDS`] words.
    #[must_use]
    pub const fn groups_per_batch(self) -> usize {
        BATCH_WORDS / self.words
    }

    /// Elements in a batch of [`BATCH_WORDS`] words.
    #[must_use]
    pub const fn elements_per_batch(self) -> usize {
        self.groups_per_batch() * self.elements
    }

    /// True when the pipeline can run this layout: at least one element per group and
    /// a word count that divides [`BATCH_WORDS`].
    #[must_use]
    pub const fn is_valid(self) -> bool {
        self.elements > 0 && self.words > 0 && BATCH_WORDS.is_multiple_of(self.words)
    }
}

/// A random op: its element type, its [`Layout`] on the stream, and its body.
///
/// Implement [`fill_group`](Sampler::fill_group), the scalar body, which is the op's
/// definition; override [`fill_batch`](Sampler::fill_batch) only for speed (ditto's own
/// ops do, with loops LLVM vectorises), and tests compare the two. With the `cuda`
/// feature, [`cuda_kernel`](Sampler::cuda_kernel) names a kernel computing the same
/// elements; without one, CUDA outputs are filled on the host and copied to the device.
///
/// Run a sampler with [`sample`](crate::sample) (a new tensor),
/// [`sample_`](crate::sample_) (into an existing one) or
/// [`sample_at`](crate::sample_at) (at a given key, drawing nothing).
///
/// The body must be a pure function of `(group, words, self)`: the pipeline calls it
/// from any thread, in any order, with the output cut into pieces, and promises the
/// same tensor for any thread count only because of that.
pub trait Sampler: Sync {
    /// The element type written. The output tensor's dtype is `Elem::DTYPE`.
    type Elem: Element;

    /// The op's name, for errors (and traces).
    fn name(&self) -> &'static str;

    /// How elements sit on the stream.
    fn layout(&self) -> Layout;

    /// The scalar body: fill one group's elements `out` (`layout().elements` of them,
    /// fewer for a partial last group) from its words `words` (`layout().words` of
    /// them). `group` is the group's index in the op, for bodies that read an input at
    /// the same position (dropout reads element `group * elements ..` of its input).
    fn fill_group(&self, group: u64, words: &[u32], out: &mut [Self::Elem]);

    /// The batch body: fill the elements of the groups `first_group ..` from one batch
    /// of [`BATCH_WORDS`] consecutive words. `out` holds
    /// [`Layout::elements_per_batch`] elements, fewer in the last batch (which still
    /// gets all its words). The default calls [`fill_group`](Sampler::fill_group) group
    /// by group; an override must give the same bits (mark it `#[inline(always)]` so it
    /// is compiled for the widest vector instructions the CPU has).
    #[inline(always)]
    fn fill_batch(&self, first_group: u64, words: &[u32; BATCH_WORDS], out: &mut [Self::Elem]) {
        let layout = self.layout();
        let groups = out
            .chunks_mut(layout.elements)
            .zip(words.chunks_exact(layout.words));
        for (g, (out, words)) in groups.enumerate() {
            self.fill_group(first_group + g as u64, words, out);
        }
    }

    /// The CUDA body, if any: the kernel computing the same elements, with its
    /// arguments (a [`KernelCall`](kernels::KernelCall); the kernel's signature is `(u64
    /// seed, u64 offset, u64 n, args..., T* out)`). Called once per op on a CUDA output,
    /// before the reservation, so an error here consumes nothing. `Ok(None)` (the
    /// default): the elements are computed on the host with the CPU body and copied to
    /// the device.
    #[cfg(feature = "cuda")]
    fn cuda_kernel(&mut self) -> kernels::Result<Option<kernels::KernelCall<'_>>> {
        Ok(None)
    }
}
