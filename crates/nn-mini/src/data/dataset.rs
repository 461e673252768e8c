//! The `Dataset` trait: indexed samples whose randomness comes from a per-sample key.

use tensor_core::Tensor;

use crate::Result;

/// The random stream a dataset gets for one sample: a word-level Philox RNG
/// ([`rng_gen::PhiloxRng`], a `rand_core::RngCore`) keyed by
/// [`sample_key`](super::sample_key)`(loader key, epoch, index)`.
///
/// Why per sample and not per worker? A per-worker stream would make sample `i`'s
/// augmentation depend on which worker loaded it and what that worker loaded before;
/// a per-sample key depends on `(seed, epoch, index)` only, so every `num_workers`
/// gives the same bits, and a resumed run sees the same augmentations.
pub type SampleRng = rng_gen::PhiloxRng;

/// One example: an input and its target. The loader stacks the samples of a batch along
/// a new first dimension, so all samples must agree in dims and dtype.
#[derive(Clone, Debug)]
pub struct Sample {
    /// The model input (e.g. features `[64]`).
    pub input: Tensor,
    /// The target (e.g. a class index as a 0-d i64 tensor).
    pub target: Tensor,
}

/// A finite, indexable collection of samples, like `torch.utils.data.Dataset`.
///
/// `get` must be a pure function of `(index, the words drawn from rng)`: no hidden
/// state, no other randomness. That is what makes batches independent of the number of
/// loader workers and lets a run resume mid-epoch. `Send + Sync` because worker threads
/// share the dataset.
pub trait Dataset: Send + Sync {
    /// Number of samples.
    fn len(&self) -> usize;

    /// True when there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sample `index` (`0..len`), drawing any augmentation randomness from `rng`.
    fn get(&self, index: usize, rng: &mut SampleRng) -> Result<Sample>;
}
