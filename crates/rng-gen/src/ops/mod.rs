//! Random tensors: `rand`, `randn`, `uniform`, `normal`, `bernoulli`, `randint`,
//! `randperm`, `bits`, `dropout`; their in-place forms (`uniform_`, `normal_`,
//! `bernoulli_`, `random_`, `bits_`, `dropout_into`); and the public way to write more
//! ([`Sampler`], [`sample`]).
//!
//! Every op runs the one pipeline of `pipeline.rs`: validate, take the output (a new
//! tensor or an existing one), reserve `ceil(words / 4)` blocks once, then fill on the
//! CPU (`cpu_fill.rs`, in parallel, bit-identical for any thread count) or launch on
//! CUDA. Each op file states its op and nothing else: the checks of its parameters, its
//! samplers (which words an element uses, the body turning them into the element, the
//! CUDA kernel doing the same) and which sampler each dtype gets. The per-element rules
//! are those of docs/contract.md §5 and [`crate::stream::convert`].

mod args;
mod attention;
#[cfg(feature = "cuda")]
mod attention_cuda;
mod bernoulli;
mod bits;
mod cpu_fill;
pub(crate) mod dropout;
mod float_sampler;
mod normal;
pub(crate) mod per_word;
mod pipeline;
mod randint;
mod randperm;
mod sampler;
mod uniform;

#[cfg(test)]
mod simd_tests;

pub use attention::{
    causal_attention, causal_attention_backward, causal_attention_unfused, AttentionSaved,
};
pub use bernoulli::{bernoulli, bernoulli_};
pub use bits::{bits, bits_};
pub use dropout::{
    dropout, dropout_backward, dropout_into, dropout_rows, dropout_with_mask, AttentionDropout,
    DropoutState, PackedMask,
};
pub use normal::{normal, normal_, randn};
pub use per_word::PerWordSampler;
pub use pipeline::{sample, sample_, sample_at};
pub use randint::{randint, random_};
pub use randperm::randperm;
pub use sampler::{Layout, Sampler, BATCH_WORDS};
pub use uniform::{rand, uniform, uniform_};

use half::{bf16, f16};
use tensor_core::Element;

use crate::stream::convert::{uniform_bf16_as_f32, uniform_f16_as_f32, uniform_f32};
use crate::stream::half_float::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};

/// The output types of the samplers that compute in f32: f32 itself, and f16 / bf16,
/// which docs/contract.md §5.10 defines as "compute f32, round to nearest even", so one
/// generic sampler serves all three and the rounding happens in exactly one place.
pub(crate) trait NarrowFloat: Element {
    /// `x` rounded to nearest even (exact for f32).
    fn round_from_f32(x: f32) -> Self;
    /// `self` as an f32 (exact).
    fn to_f32(self) -> f32;
    /// The uniform of `word` in this type's precision (24, 11 or 8 bits), as the f32 it
    /// equals exactly.
    fn unit(word: u32) -> f32;
}

impl NarrowFloat for f32 {
    #[inline(always)]
    fn round_from_f32(x: f32) -> Self {
        x
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn unit(word: u32) -> f32 {
        uniform_f32(word)
    }
}

impl NarrowFloat for f16 {
    #[inline(always)]
    fn round_from_f32(x: f32) -> Self {
        f32_to_f16(x)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16_to_f32(self)
    }
    #[inline(always)]
    fn unit(word: u32) -> f32 {
        uniform_f16_as_f32(word)
    }
}

impl NarrowFloat for bf16 {
    #[inline(always)]
    fn round_from_f32(x: f32) -> Self {
        f32_to_bf16(x)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16_to_f32(self)
    }
    #[inline(always)]
    fn unit(word: u32) -> f32 {
        uniform_bf16_as_f32(word)
    }
}
