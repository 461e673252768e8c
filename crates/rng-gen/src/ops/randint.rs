//! `randint` and `random_`: uniform integers on `[low, high)`.
//!
//! Two words per element: `low + below(w_2i, w_2i+1, high - low)`, the high half of a
//! 64x64-bit product (docs/contract.md §5.8). Fixed consumption, no rejection loop.

use tensor_core::{DType, Device, Tensor};

use super::pipeline::{IntoTensor, NewTensor, RunSampler};
use super::sampler::{Layout, Sampler};
use crate::stream::convert::below;
use crate::{Generator, RngError};

/// The number of values in `[low, high)`, computed without overflow (up to 2^64 - 1).
#[track_caller]
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
#[track_caller]
pub fn randint(
    low: i64,
    high: i64,
    shape: &[usize],
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    const OP: &str = "randint";
    let run = NewTensor::reserving(shape, device, generator)?;
    let range = range_len(OP, low, high)?;
    run.run(Randint { op: OP, low, range })
}

/// [`randint`] into the existing I64 tensor `t` (`torch.Tensor.random_(low, high)`): the
/// same values and consumption as `randint(low, high, t.dims(), t.device(), generator)`.
/// Errors with `UnsupportedDType` for other dtypes; `t` must be contiguous.
#[track_caller]
pub fn random_(
    t: &mut Tensor,
    low: i64,
    high: i64,
    generator: Option<&Generator>,
) -> Result<(), RngError> {
    const OP: &str = "random_";
    if t.dtype() != DType::I64 {
        return Err(RngError::UnsupportedDType {
            op: OP,
            dtype: t.dtype(),
            supported: "i64 (bits_ fills u32 tensors with raw words)",
        });
    }
    let range = range_len(OP, low, high)?;
    IntoTensor::reserving(t, generator)
        .run(Randint { op: OP, low, range })
        .map(|_| ())
}

/// `low + below(w0, w1, range)`.
pub(crate) struct Randint {
    op: &'static str,
    low: i64,
    range: u64,
}

impl Sampler for Randint {
    type Elem = i64;
    fn name(&self) -> &'static str {
        self.op
    }
    fn layout(&self) -> Layout {
        Layout::per_element(2)
    }
    fn fill_group(&self, _group: u64, w: &[u32], out: &mut [i64]) {
        // Exact: the sum is in [low, high).
        out[0] = (i128::from(self.low) + i128::from(below(w[0], w[1], self.range))) as i64;
    }
    #[cfg(feature = "cuda")]
    fn cuda_kernel(&mut self) -> kernels::Result<Option<kernels::KernelCall<'_>>> {
        Ok(Some(kernels::launch::randint_call(self.low, self.range)))
    }
}

#[cfg(test)]
pub(crate) mod samplers {
    //! The sampler, for the SIMD-versus-scalar tests.
    pub(crate) fn randint(low: i64, range: u64) -> super::Randint {
        super::Randint {
            op: "randint",
            low,
            range,
        }
    }
}
