//! `bernoulli` and `bernoulli_`: independent coin flips with one probability.
//!
//! One word per element: 1 iff the f32 uniform of the word is `< p`
//! (docs/contract.md §5.6).

use half::{bf16, f16};
use tensor_core::{DType, Device, Element, Tensor};

use super::args::probability;
use super::per_word::PerWordSampler;
use super::pipeline::{IntoTensor, NewTensor, RunSampler};
use crate::stream::convert;
use crate::{Generator, RngError};

/// Samples that are 1 with probability `p` and 0 otherwise (`torch.bernoulli` with a
/// scalar probability), as 1.0 / 0.0 in a float dtype, 1 / 0 in U8, or true / false in
/// Bool. Element `i` is 1 iff the f32 uniform of word `i` is `< p as f32`, so `p = 0`
/// gives all zeros and `p = 1` all ones. Errors unless `p` is in [0, 1].
#[track_caller]
pub fn bernoulli(
    shape: &[usize],
    p: f64,
    dtype: DType,
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    let run = NewTensor::reserving(shape, device, generator)?;
    bernoulli_sampler("bernoulli", p, dtype, run)
}

/// [`bernoulli`] into the existing tensor `t` (`torch.Tensor.bernoulli_(p)`), of a float
/// dtype, U8 or Bool: the same values and consumption as `bernoulli(t.dims(), p,
/// t.dtype(), t.device(), generator)`. `t` must be contiguous.
#[track_caller]
pub fn bernoulli_(t: &mut Tensor, p: f64, generator: Option<&Generator>) -> Result<(), RngError> {
    let dtype = t.dtype();
    let run = IntoTensor::reserving(t, generator);
    bernoulli_sampler("bernoulli_", p, dtype, run).map(|_| ())
}

/// Checks `p` and `dtype`, and runs the sampler `dtype` gets.
#[track_caller]
fn bernoulli_sampler<R: RunSampler>(
    op: &'static str,
    p: f64,
    dtype: DType,
    run: R,
) -> Result<R::Out, RngError> {
    if matches!(dtype, DType::I64 | DType::U32) {
        return Err(RngError::UnsupportedDType {
            op,
            dtype,
            supported: "f32, f64, f16, bf16, u8, bool",
        });
    }
    let p = probability(op, p)?;
    match dtype {
        DType::F32 => run.run(Bernoulli::<f32>::new(op, p)),
        DType::F64 => run.run(Bernoulli::<f64>::new(op, p)),
        DType::F16 => run.run(Bernoulli::<f16>::new(op, p)),
        DType::BF16 => run.run(Bernoulli::<bf16>::new(op, p)),
        DType::U8 => run.run(Bernoulli::<u8>::new(op, p)),
        _ => run.run(Bernoulli::<bool>::new(op, p)),
    }
}

/// Coin flips as `T`'s one and zero (converted once, not per element).
pub(crate) struct Bernoulli<T> {
    op: &'static str,
    p: f32,
    one: T,
    zero: T,
}

impl<T: Element> Bernoulli<T> {
    pub(crate) fn new(op: &'static str, p: f32) -> Self {
        Bernoulli {
            op,
            p,
            one: T::from_f64(1.0),
            zero: T::from_f64(0.0),
        }
    }
}

impl<T: Element> PerWordSampler for Bernoulli<T> {
    type Elem = T;
    fn name(&self) -> &'static str {
        self.op
    }
    #[inline(always)]
    fn element(&self, word: u32) -> T {
        if convert::bernoulli(word, self.p) {
            self.one
        } else {
            self.zero
        }
    }
    #[cfg(feature = "cuda")]
    fn cuda_kernel(&mut self) -> kernels::Result<Option<kernels::KernelCall<'_>>> {
        kernels::launch::bernoulli_call(T::DTYPE, self.p).map(Some)
    }
}

#[cfg(test)]
pub(crate) mod samplers {
    //! The sampler, for the SIMD-versus-scalar tests.
    pub(crate) use super::Bernoulli;
}
