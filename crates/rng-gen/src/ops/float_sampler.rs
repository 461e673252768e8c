//! The set-up shared by the float ops with two parameters, `uniform` (low, high) and
//! `normal` (mean, std): their entry points, one sampler type for every float dtype,
//! and the one place where a dtype picks its sampler.
//!
//! Both ops compute f32, f16 and bf16 in f32 and round once (docs/contract.md §5.10), so
//! one sampler body generic over the [`NarrowFloat`] output serves those three, and f64
//! has a body of its own (other words per element, f64 arithmetic). What every one of
//! those samplers holds is the same: the op's name and its checked parameters. So
//! [`FloatSampler`] holds them once, each op writes only its parameter type (a
//! [`FloatParams`], in `args.rs` next to the checks) and its [`Sampler`] bodies, and
//! [`float_tensor`] / [`float_tensor_`] run every public form of both ops: the same
//! order of checks (shape, dtype, parameters), and [`FloatOp::sample`] mapping the
//! dtype to the sampler, so the two ops cannot come to disagree on what they accept.

use std::marker::PhantomData;

use half::{bf16, f16};
use tensor_core::{DType, Device, Tensor};

use super::args::{FloatParams, FLOAT_DTYPES};
use super::pipeline::{IntoTensor, NewTensor, RunSampler};
use super::sampler::Sampler;
#[cfg(doc)]
use super::NarrowFloat;
use crate::{Generator, RngError};

/// The allocating form of a float op (`rand`, `uniform`, `randn`, `normal`): checks the
/// shape, then `dtype` and the parameters, all before the generator is touched, then
/// samples a new tensor of `shape`.
#[track_caller]
pub(crate) fn float_tensor<P: FloatOp>(
    op: &'static str,
    shape: &[usize],
    params: (f64, f64),
    dtype: DType,
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    let run = NewTensor::reserving(shape, device, generator)?;
    let params = P::checked(op, params, dtype, device)?;
    params.sample(op, dtype, run)
}

/// The in-place form of a float op (`uniform_`, `normal_`): the same checks and values
/// as [`float_tensor`] of `t`'s shape, dtype and device, written into `t`.
#[track_caller]
pub(crate) fn float_tensor_<P: FloatOp>(
    op: &'static str,
    t: &mut Tensor,
    params: (f64, f64),
    generator: Option<&Generator>,
) -> Result<(), RngError> {
    let dtype = t.dtype();
    let params = P::checked(op, params, dtype, t.device())?;
    params
        .sample(op, dtype, IntoTensor::reserving(t, generator))
        .map(|_| ())
}

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

/// The parameters of a float op whose [`FloatSampler`] exists for every float dtype:
/// what [`float_tensor`] and [`float_tensor_`] need (`MeanStd`, `UniformRange`).
pub(crate) trait FloatOp: FloatParams {
    /// Runs the sampler of `dtype` for the op `op` with these checked parameters.
    fn sample<R: RunSampler>(
        self,
        op: &'static str,
        dtype: DType,
        run: R,
    ) -> Result<R::Out, RngError>;
}

impl<P: FloatParams> FloatOp for P
where
    FloatSampler<P, f32>: Sampler<Elem = f32>,
    FloatSampler<P, f16>: Sampler<Elem = f16>,
    FloatSampler<P, bf16>: Sampler<Elem = bf16>,
    FloatSampler<P, f64>: Sampler<Elem = f64>,
{
    /// The one place where a dtype picks its sampler. [`FloatParams::checked`] refused
    /// any other dtype first; it is refused here all the same.
    #[track_caller]
    fn sample<R: RunSampler>(
        self,
        op: &'static str,
        dtype: DType,
        run: R,
    ) -> Result<R::Out, RngError> {
        match dtype {
            DType::F32 => run.run(FloatSampler::<P, f32>::new(op, self)),
            DType::F16 => run.run(FloatSampler::<P, f16>::new(op, self)),
            DType::BF16 => run.run(FloatSampler::<P, bf16>::new(op, self)),
            DType::F64 => run.run(FloatSampler::<P, f64>::new(op, self)),
            _ => Err(RngError::UnsupportedDType {
                op,
                dtype,
                supported: FLOAT_DTYPES,
            }),
        }
    }
}
