//! `rand` and `uniform`: uniform samples on `[low, high)`.

use half::{bf16, f16};
use kernels::RandomOp;
use tensor_core::{DType, Device, Tensor};

use super::args::{check_float, elem_count, generator_for, uniform_range};
use super::fill::{fill, fill_map, Layout};
use super::{cpu_sample, cuda_dispatch, RoundFromF32};
use crate::stream::convert::{
    scale_uniform_f32, scale_uniform_f64, uniform_bf16, uniform_f16, uniform_f32, uniform_f64,
};
use crate::{Generator, RngError};

/// Uniform samples on [0, 1) in a float `dtype` (`torch.rand`). Bit-identical to
/// `torch.func._random.uniform` for the same key: f32, f16 and bf16 use one word per
/// element (24, 11 and 8 random bits, all values exact multiples of 2^-24, 2^-11,
/// 2^-8), f64 two words (53 bits).
pub fn rand(
    shape: &[usize],
    dtype: DType,
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    uniform_op("rand", shape, 0.0, 1.0, dtype, device, generator)
}

/// Uniform samples on `[low, high)` (`torch.empty(..).uniform_(low, high)`):
/// `low + (high - low) * u` with `u` the [`rand`] value, computed in f32 (one multiply,
/// one add, never fused) and rounded to nearest even for f16 / bf16, or in f64 for f64.
/// Errors unless `low < high`, both finite and representable in `dtype`. Rounding can
/// make a value equal `high` when the interval is wide relative to the precision, as in
/// PyTorch.
pub fn uniform(
    shape: &[usize],
    low: f64,
    high: f64,
    dtype: DType,
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    uniform_op("uniform", shape, low, high, dtype, device, generator)
}

/// The f32 / f16 / bf16 sampler: `u = unit(word)` (exact in `T`), then
/// `low + (high - low) * u` in f32 and one rounding to `T`.
fn uniform_in<T: RoundFromF32>(
    shape: &[usize],
    n: usize,
    generator: &Generator,
    low: f32,
    high: f32,
    unit: impl Fn(u32) -> f32 + Sync,
) -> Result<Tensor, RngError> {
    cpu_sample(
        shape,
        n,
        generator,
        RandomOp::Uniform,
        T::DTYPE,
        |out: &mut [T], key| {
            fill_map(out, key, move |w| {
                T::round_from_f32(scale_uniform_f32(unit(w), low, high))
            });
        },
    )
}

fn uniform_op(
    op: &'static str,
    shape: &[usize],
    low: f64,
    high: f64,
    dtype: DType,
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    let n = elem_count(shape)?;
    check_float(op, dtype)?;
    uniform_range(op, low, high, dtype)?;
    let generator = generator_for(op, device, generator)?;
    let (lo, hi) = (low as f32, high as f32);
    match (device, dtype) {
        (Device::Cuda(ordinal), _) => {
            let key = generator.reserve(RandomOp::Uniform, dtype, n as u64);
            cuda_dispatch::uniform(shape, dtype, key, n as u64, low, high, ordinal)
        }
        (Device::Cpu, DType::F32) => uniform_in::<f32>(shape, n, &generator, lo, hi, uniform_f32),
        (Device::Cpu, DType::F16) => {
            uniform_in::<f16>(shape, n, &generator, lo, hi, |w| uniform_f16(w).to_f32())
        }
        (Device::Cpu, DType::BF16) => {
            uniform_in::<bf16>(shape, n, &generator, lo, hi, |w| uniform_bf16(w).to_f32())
        }
        (Device::Cpu, _) => cpu_sample(
            shape,
            n,
            &generator,
            RandomOp::Uniform,
            DType::F64,
            |out: &mut [f64], key| {
                fill(out, key, Layout::per_element(2), |_, w, out| {
                    out[0] = scale_uniform_f64(uniform_f64(w[0], w[1]), low, high);
                });
            },
        ),
    }
}
