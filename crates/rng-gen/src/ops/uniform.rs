//! `rand`, `uniform` and `uniform_`: uniform samples on `[low, high)`.
//!
//! One word per element (two for f64): `u` is the element type's uniform of its word
//! (docs/contract.md §5.2: 24, 11 or 8 random bits for f32, f16, bf16; 53 bits from two
//! words for f64), then `low + (high - low) * u`, one multiply then one add, in f32
//! (rounded to f16 / bf16 once) or in f64.

use tensor_core::{DType, Device, Tensor};

use super::args::UniformRange;
use super::float_sampler::{float_tensor, float_tensor_, FloatSampler};
use super::per_word::PerWordSampler;
use super::sampler::{Layout, Sampler, BATCH_WORDS};
use super::NarrowFloat;
use crate::stream::convert::{scale_uniform_f32, scale_uniform_f64, uniform_f64};
use crate::{Generator, RngError};

/// Uniform samples on [0, 1) in a float `dtype` (`torch.rand`). Bit-identical to
/// `torch.func._random.uniform` for the same key: f32, f16 and bf16 use one word per
/// element (24, 11 and 8 random bits, all values exact multiples of 2^-24, 2^-11,
/// 2^-8), f64 two words (53 bits).
#[track_caller]
pub fn rand(
    shape: &[usize],
    dtype: DType,
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    float_tensor::<UniformRange>("rand", shape, (0.0, 1.0), dtype, device, generator)
}

/// Uniform samples on `[low, high)` (`torch.empty(..).uniform_(low, high)`):
/// `low + (high - low) * u` with `u` the [`rand`] value, computed in f32 (one multiply,
/// one add, never fused) and rounded to nearest even for f16 / bf16, or in f64 for f64.
/// Errors unless `low < high`, both finite and representable in `dtype`. Rounding can
/// make a value equal `high` when the interval is wide relative to the precision, as in
/// PyTorch.
#[track_caller]
pub fn uniform(
    shape: &[usize],
    low: f64,
    high: f64,
    dtype: DType,
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    float_tensor::<UniformRange>("uniform", shape, (low, high), dtype, device, generator)
}

/// [`uniform`] into the existing float tensor `t` (`torch.Tensor.uniform_(low, high)`):
/// the same values and the same consumption as `uniform(t.dims(), low, high, t.dtype(),
/// t.device(), generator)`. `t` must be contiguous (a strided view is a
/// `NotContiguous` error: fill a contiguous tensor and `copy_from_` it).
#[track_caller]
pub fn uniform_(
    t: &mut Tensor,
    low: f64,
    high: f64,
    generator: Option<&Generator>,
) -> Result<(), RngError> {
    float_tensor_::<UniformRange>("uniform_", t, (low, high), generator)
}

/// The uniform sampler writing `T`: f32 / f16 / bf16 use one word per element, computed
/// in f32 and rounded once to `T`; f64 two words (53 bits), computed in f64.
pub(crate) type Uniform<T> = FloatSampler<UniformRange, T>;

impl<T: NarrowFloat> PerWordSampler for Uniform<T> {
    type Elem = T;
    fn name(&self) -> &'static str {
        self.op
    }
    #[inline(always)]
    fn element(&self, word: u32) -> T {
        let (low, high) = self.params.bounds();
        T::round_from_f32(scale_uniform_f32(T::unit(word), low as f32, high as f32))
    }
    #[cfg(feature = "cuda")]
    fn cuda_kernel(&mut self) -> kernels::Result<Option<kernels::KernelCall<'_>>> {
        let (low, high) = self.params.bounds();
        kernels::launch::uniform_call(T::DTYPE, low, high).map(Some)
    }
}

impl Uniform<f64> {
    #[inline(always)]
    fn element_of(&self, w0: u32, w1: u32) -> f64 {
        let (low, high) = self.params.bounds();
        scale_uniform_f64(uniform_f64(w0, w1), low, high)
    }
}

impl Sampler for Uniform<f64> {
    type Elem = f64;
    fn name(&self) -> &'static str {
        self.op
    }
    fn layout(&self) -> Layout {
        Layout::per_element(2)
    }
    fn fill_group(&self, _group: u64, w: &[u32], out: &mut [f64]) {
        out[0] = self.element_of(w[0], w[1]);
    }
    #[inline(always)]
    fn fill_batch(&self, _first: u64, words: &[u32; BATCH_WORDS], out: &mut [f64]) {
        for (o, w) in out.iter_mut().zip(words.chunks_exact(2)) {
            *o = self.element_of(w[0], w[1]);
        }
    }
    #[cfg(feature = "cuda")]
    fn cuda_kernel(&mut self) -> kernels::Result<Option<kernels::KernelCall<'_>>> {
        let (low, high) = self.params.bounds();
        kernels::launch::uniform_call(DType::F64, low, high).map(Some)
    }
}

#[cfg(test)]
pub(crate) mod samplers {
    //! The samplers, for the SIMD-versus-scalar tests.
    pub(crate) use super::Uniform;
}
