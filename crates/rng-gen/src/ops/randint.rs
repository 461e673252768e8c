//! `randint`: uniform integers on `[low, high)`.

use kernels::RandomOp;
use tensor_core::{DType, Device, Tensor};

use super::args::{elem_count, generator_for};
use super::fill::{fill, Layout};
use super::{cpu_sample, cuda_dispatch};
use crate::stream::convert::below;
use crate::{Generator, RngError};

/// The number of values in `[low, high)`, computed without overflow (up to 2^64 - 1).
pub(crate) fn range_len(op: &'static str, low: i64, high: i64) -> Result<u64, RngError> {
    if low >= high {
        return Err(RngError::EmptyRange { op, low, high });
    }
    Ok((i128::from(high) - i128::from(low)) as u64)
}

/// Uniform I64 samples on `[low, high)` (`torch.randint(low, high, shape)`): element `i`
/// is `low + below(w_2i, w_2i+1, high - low)`, the high half of a 64x64-bit product.
/// Two words per element and no rejection loop, so the consumption is fixed and the bias
/// is below `(high - low) / 2^64`. Errors with `EmptyRange` unless `low < high`.
pub fn randint(
    low: i64,
    high: i64,
    shape: &[usize],
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    const OP: &str = "randint";
    let n = elem_count(shape)?;
    let range = range_len(OP, low, high)?;
    let generator = generator_for(OP, device, generator)?;
    if let Device::Cuda(ordinal) = device {
        let key = generator.reserve(RandomOp::Randint, DType::I64, n as u64);
        return cuda_dispatch::randint(shape, key, n as u64, low, range, ordinal);
    }
    cpu_sample(
        shape,
        n,
        &generator,
        RandomOp::Randint,
        DType::I64,
        |out: &mut [i64], key| {
            fill(out, key, Layout::per_element(2), |_, w, out| {
                // Exact: the sum is in [low, high).
                out[0] = (i128::from(low) + i128::from(below(w[0], w[1], range))) as i64;
            });
        },
    )
}
