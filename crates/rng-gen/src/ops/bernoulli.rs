//! `bernoulli` and `bernoulli_`: independent coin flips with one probability.
//!
//! One word per element: 1 iff the f32 uniform of the word is `< p`
//! (docs/contract.md §5.6).

use std::marker::PhantomData;

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

/// Coin flips as `T`'s one and zero.
pub(crate) struct Bernoulli<T> {
    op: &'static str,
    p: f32,
    _elem: PhantomData<T>,
}

impl<T: Coin> Bernoulli<T> {
    pub(crate) fn new(op: &'static str, p: f32) -> Self {
        Bernoulli {
            op,
            p,
            _elem: PhantomData,
        }
    }
}

/// An element type bernoulli writes: 1 for heads, 0 for tails.
///
/// Why not `if heads { one } else { zero }` with the two values converted once: LLVM
/// turns that select into a mask-and-merge per vector that ran the f32 element stage at
/// 0.4x the speed of computing the value from the bit (`u32::from(heads) as f32`, one
/// integer-to-float conversion), which made bernoulli 20-30% slower than uniform at
/// every SIMD level (benches/RESULTS.md, "Random ops on AVX2"). The values are the same
/// bits as `T::from_f64(1.0)` and `T::from_f64(0.0)` (a unit test checks every type).
pub(crate) trait Coin: Element {
    /// One for heads, zero for tails.
    fn coin(heads: bool) -> Self;
}

impl Coin for f32 {
    #[inline(always)]
    fn coin(heads: bool) -> f32 {
        u32::from(heads) as f32
    }
}

impl Coin for f64 {
    #[inline(always)]
    fn coin(heads: bool) -> f64 {
        f64::from(u32::from(heads))
    }
}

impl Coin for f16 {
    #[inline(always)]
    fn coin(heads: bool) -> f16 {
        f16::from_bits(u16::from(heads) * f16::ONE.to_bits())
    }
}

impl Coin for bf16 {
    #[inline(always)]
    fn coin(heads: bool) -> bf16 {
        bf16::from_bits(u16::from(heads) * bf16::ONE.to_bits())
    }
}

impl Coin for u8 {
    #[inline(always)]
    fn coin(heads: bool) -> u8 {
        u8::from(heads)
    }
}

impl Coin for bool {
    #[inline(always)]
    fn coin(heads: bool) -> bool {
        heads
    }
}

impl<T: Coin> PerWordSampler for Bernoulli<T> {
    type Elem = T;
    fn name(&self) -> &'static str {
        self.op
    }
    #[inline(always)]
    fn element(&self, word: u32) -> T {
        T::coin(convert::bernoulli(word, self.p))
    }
    #[cfg(feature = "cuda")]
    fn cuda_kernel(&mut self) -> kernels::Result<Option<kernels::KernelCall<'_>>> {
        kernels::launch::bernoulli_call(T::DTYPE, self.p).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same_as_from_f64<T: Coin>() {
        let bits = |v: T| v.to_f64().to_bits();
        assert_eq!(bits(T::coin(true)), bits(T::from_f64(1.0)), "{}", T::DTYPE);
        assert_eq!(bits(T::coin(false)), bits(T::from_f64(0.0)), "{}", T::DTYPE);
        assert_eq!(T::coin(true), T::from_f64(1.0), "{}", T::DTYPE);
        assert_eq!(T::coin(false), T::from_f64(0.0), "{}", T::DTYPE);
    }

    #[test]
    fn coins_are_one_and_zero_of_every_type() {
        same_as_from_f64::<f32>();
        same_as_from_f64::<f64>();
        same_as_from_f64::<f16>();
        same_as_from_f64::<bf16>();
        same_as_from_f64::<u8>();
        same_as_from_f64::<bool>();
        // The sign of zero is part of the bits: +0.0, as from_f64(0.0) gives.
        assert_eq!(f32::coin(false).to_bits(), 0);
        assert_eq!(f16::coin(false).to_bits(), 0);
    }
}

#[cfg(test)]
pub(crate) mod samplers {
    //! The sampler, for the SIMD-versus-scalar tests.
    pub(crate) use super::Bernoulli;
}
