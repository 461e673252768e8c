//! `bernoulli`: independent coin flips with one probability.

use half::{bf16, f16};
use kernels::RandomOp;
use tensor_core::{DType, Device, Element, Tensor};

use super::args::{elem_count, generator_for, probability};
use super::fill::fill_map;
use super::{cpu_sample, cuda_dispatch};
use crate::stream::convert;
use crate::{Generator, RngError};

/// Samples that are 1 with probability `p` and 0 otherwise (`torch.bernoulli` with a
/// scalar probability), as 1.0 / 0.0 in a float dtype, 1 / 0 in U8, or true / false in
/// Bool. Element `i` is 1 iff the f32 uniform of word `i` is `< p as f32`, so `p = 0`
/// gives all zeros and `p = 1` all ones. Errors unless `p` is in [0, 1].
pub fn bernoulli(
    shape: &[usize],
    p: f64,
    dtype: DType,
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    const OP: &str = "bernoulli";
    let n = elem_count(shape)?;
    if matches!(dtype, DType::I64 | DType::U32) {
        return Err(RngError::UnsupportedDType {
            op: OP,
            dtype,
            supported: "f32, f64, f16, bf16, u8, bool",
        });
    }
    let p32 = probability(OP, p)?;
    let generator = generator_for(OP, device, generator)?;
    if let Device::Cuda(ordinal) = device {
        let key = generator.reserve(RandomOp::Bernoulli, dtype, n as u64);
        return cuda_dispatch::bernoulli(shape, dtype, key, n as u64, p32, ordinal);
    }
    fn flips<T: Element>(
        shape: &[usize],
        n: usize,
        generator: &Generator,
        p: f32,
        one: T,
        zero: T,
    ) -> Result<Tensor, RngError> {
        cpu_sample(
            shape,
            n,
            generator,
            RandomOp::Bernoulli,
            T::DTYPE,
            |out: &mut [T], key| {
                fill_map(
                    out,
                    key,
                    move |w| if convert::bernoulli(w, p) { one } else { zero },
                );
            },
        )
    }
    match dtype {
        DType::F32 => flips(shape, n, &generator, p32, 1f32, 0.0),
        DType::F64 => flips(shape, n, &generator, p32, 1f64, 0.0),
        DType::F16 => flips(shape, n, &generator, p32, f16::ONE, f16::ZERO),
        DType::BF16 => flips(shape, n, &generator, p32, bf16::ONE, bf16::ZERO),
        DType::U8 => flips(shape, n, &generator, p32, 1u8, 0),
        _ => flips(shape, n, &generator, p32, true, false),
    }
}
