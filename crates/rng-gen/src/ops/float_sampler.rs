//! The set-up shared by the float ops with two parameters, `uniform` (low, high) and
//! `normal` (mean, std): one sampler type for every float dtype, and the one place where a
//! dtype picks its sampler.
//!
//! Both ops compute f32, f16 and bf16 in f32 and round once (docs/contract.md §5.10), so
//! one sampler body generic over the [`NarrowFloat`] output serves those three, and f64
//! has a body of its own (other words per element, f64 arithmetic). What every one of
//! those samplers holds is the same: the op's name and its checked parameters. So
//! [`FloatSampler`] holds them once, each op writes only its parameter type and its
//! [`Sampler`] bodies, and [`run_float_sampler`] maps the dtype to the sampler for both
//! ops, so the two cannot come to disagree on which dtypes they accept.

use std::marker::PhantomData;

use half::{bf16, f16};
use tensor_core::DType;

use super::args::FLOAT_DTYPES;
use super::pipeline::RunSampler;
use super::sampler::Sampler;
#[cfg(doc)]
use super::NarrowFloat;
use crate::RngError;

/// The sampler of a float op with parameters `P` (already checked) writing elements of
/// type `T`; the op implements [`Sampler`] for it, generically for the [`NarrowFloat`]
/// types and separately for f64.
pub(crate) struct FloatSampler<P, T> {
    /// The op's name, for errors and traces.
    pub(crate) op: &'static str,
    /// The op's parameters, as the caller gave them (in f64).
    pub(crate) params: P,
    _out: PhantomData<T>,
}

impl<P, T> FloatSampler<P, T> {
    pub(crate) fn new(op: &'static str, params: P) -> Self {
        FloatSampler {
            op,
            params,
            _out: PhantomData,
        }
    }
}

/// Runs the sampler of `dtype` for the float op `op` with the checked `params`. The op
/// checked `dtype` first (`check_float`); any other dtype is refused here all the same.
#[track_caller]
pub(crate) fn run_float_sampler<P: Copy, R: RunSampler>(
    op: &'static str,
    params: P,
    dtype: DType,
    run: R,
) -> Result<R::Out, RngError>
where
    FloatSampler<P, f32>: Sampler<Elem = f32>,
    FloatSampler<P, f16>: Sampler<Elem = f16>,
    FloatSampler<P, bf16>: Sampler<Elem = bf16>,
    FloatSampler<P, f64>: Sampler<Elem = f64>,
{
    match dtype {
        DType::F32 => run.run(FloatSampler::<P, f32>::new(op, params)),
        DType::F16 => run.run(FloatSampler::<P, f16>::new(op, params)),
        DType::BF16 => run.run(FloatSampler::<P, bf16>::new(op, params)),
        DType::F64 => run.run(FloatSampler::<P, f64>::new(op, params)),
        _ => Err(RngError::UnsupportedDType {
            op,
            dtype,
            supported: FLOAT_DTYPES,
        }),
    }
}
