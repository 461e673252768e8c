//! `randn` and `normal`: Gaussian samples by Box-Muller on pairs of words.

use half::{bf16, f16};
use kernels::RandomOp;
use tensor_core::{DType, Device, Tensor};

use super::args::{check_float, elem_count, generator_for, normal_params};
use super::fill::{fill, fill_batches, Layout};
use super::{cpu_sample, cuda_dispatch, RoundFromF32};
use crate::stream::convert::{box_muller, scale_normal_f32, uniform_f64};
use crate::{Generator, RngError};

/// Standard normal samples (`torch.randn`): [`normal`] with mean 0 and std 1.
pub fn randn(
    shape: &[usize],
    dtype: DType,
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    normal_op("randn", shape, 0.0, 1.0, dtype, device, generator)
}

/// Normal samples `mean + std * z` (`torch.normal` with scalar mean and std).
///
/// f32: pair `m` uses words `2m`, `2m+1` and ditto's own `ln` / `sincospi`
/// ([`box_muller`]), so results are bit-identical on CPU and GPU; an odd count still
/// consumes its last pair. f16 / bf16: the f32 result rounded to nearest even.
///
/// f64 is CPU-only and outside the bit-identical CPU/GPU contract: pair `m` uses words
/// `4m..4m+3`, `u1 = 1 - uniform_f64(w0, w1)` (in (0, 1]), `u2 = uniform_f64(w2, w3)`,
/// `r = sqrt(-2 ln u1)`, `z = (r cos 2πu2, r sin 2πu2)` with the platform's f64
/// `ln` / `sin` / `cos`, so the last bit may differ between math libraries. On a CUDA
/// device f64 is refused with `UnsupportedDType`.
///
/// Errors unless `mean` is finite and `std` is finite and `>= 0` (in f32 for the f32,
/// f16 and bf16 dtypes).
pub fn normal(
    shape: &[usize],
    mean: f64,
    std: f64,
    dtype: DType,
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    normal_op("normal", shape, mean, std, dtype, device, generator)
}

/// Box-Muller in f64 on four words (the CPU-only f64 normal).
fn box_muller_f64(w: &[u32]) -> (f64, f64) {
    let u1 = 1.0 - uniform_f64(w[0], w[1]);
    let u2 = uniform_f64(w[2], w[3]);
    let radius = (-2.0 * u1.ln()).sqrt();
    let theta = std::f64::consts::TAU * u2;
    (radius * theta.cos(), radius * theta.sin())
}

/// Fills one pair (or the last, single element) with `convert(z)`.
fn store<Z, T>(out: &mut [T], (z0, z1): (Z, Z), convert: impl Fn(Z) -> T) {
    out[0] = convert(z0);
    if let Some(second) = out.get_mut(1) {
        *second = convert(z1);
    }
}

/// The f32 / f16 / bf16 sampler: Box-Muller and `mean + std * z` in f32, then one
/// rounding to `T`. Pair `m` uses words `2m` and `2m+1`.
fn normal_in<T: RoundFromF32>(
    shape: &[usize],
    n: usize,
    generator: &Generator,
    mean: f32,
    std: f32,
) -> Result<Tensor, RngError> {
    cpu_sample(
        shape,
        n,
        generator,
        RandomOp::Normal,
        T::DTYPE,
        |out: &mut [T], key| {
            fill_batches(out, key, Layout { elems: 2, words: 2 }, |_, words, part| {
                for (pair, w) in part.chunks_mut(2).zip(words.chunks_exact(2)) {
                    store(pair, box_muller(w[0], w[1]), |z| {
                        T::round_from_f32(scale_normal_f32(z, mean, std))
                    });
                }
            });
        },
    )
}

fn normal_op(
    op: &'static str,
    shape: &[usize],
    mean: f64,
    std: f64,
    dtype: DType,
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    let n = elem_count(shape)?;
    check_float(op, dtype)?;
    if device.is_cuda() && dtype == DType::F64 {
        return Err(RngError::UnsupportedDType {
            op,
            dtype,
            supported: "f32, f16, bf16 on CUDA (f64 normals are CPU-only)",
        });
    }
    normal_params(op, mean, std, dtype)?;
    let generator = generator_for(op, device, generator)?;
    let (mean32, std32) = (mean as f32, std as f32);
    match (device, dtype) {
        (Device::Cuda(ordinal), _) => {
            let key = generator.reserve(RandomOp::Normal, dtype, n as u64);
            cuda_dispatch::normal(shape, dtype, key, n as u64, mean, std, ordinal)
        }
        (Device::Cpu, DType::F32) => normal_in::<f32>(shape, n, &generator, mean32, std32),
        (Device::Cpu, DType::F16) => normal_in::<f16>(shape, n, &generator, mean32, std32),
        (Device::Cpu, DType::BF16) => normal_in::<bf16>(shape, n, &generator, mean32, std32),
        (Device::Cpu, _) => cpu_sample(
            shape,
            n,
            &generator,
            RandomOp::Normal,
            DType::F64,
            |out: &mut [f64], key| {
                fill(out, key, Layout { elems: 2, words: 4 }, |_, w, out| {
                    store(out, box_muller_f64(w), |z| mean + std * z);
                });
            },
        ),
    }
}
