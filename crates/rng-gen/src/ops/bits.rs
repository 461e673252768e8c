//! `bits`: the raw stream as a U32 tensor.

use kernels::RandomOp;
use tensor_core::{DType, Device, Tensor};

use super::args::{elem_count, generator_for};
use super::fill::fill_map;
use super::{cpu_sample, cuda_dispatch};
use crate::{Generator, RngError};

/// A U32 tensor of raw Philox words: element `i` is word `i` of the reserved stretch
/// (`torch.func._random.bits`). For tests, hashing, and custom samplers that need the
/// words themselves. Consumes one word per element.
pub fn bits(
    shape: &[usize],
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    const OP: &str = "bits";
    let n = elem_count(shape)?;
    let generator = generator_for(OP, device, generator)?;
    match device {
        Device::Cuda(ordinal) => {
            let key = generator.reserve(RandomOp::Bits, DType::U32, n as u64);
            cuda_dispatch::bits(shape, key, n as u64, ordinal)
        }
        Device::Cpu => cpu_sample(
            shape,
            n,
            &generator,
            RandomOp::Bits,
            DType::U32,
            |out: &mut [u32], key| fill_map(out, key, |w| w),
        ),
    }
}
