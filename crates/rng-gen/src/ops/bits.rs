//! `bits` and `bits_`: the raw stream as a U32 tensor.

use tensor_core::{Device, Tensor};

use super::per_word::PerWordSampler;
use super::pipeline::{IntoTensor, NewTensor, RunSampler};
use crate::{Generator, RngError};

/// A U32 tensor of raw Philox words: element `i` is word `i` of the reserved stretch
/// (`torch.func._random.bits`). For tests, hashing, and custom samplers that need the
/// words themselves. Consumes one word per element.
#[track_caller]
pub fn bits(
    shape: &[usize],
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    NewTensor::reserving(shape, device, generator)?.run(Bits { op: "bits" })
}

/// [`bits`] into the existing U32 tensor `t`: the raw-bits fill that PyTorch's
/// `Tensor.random_()` is for integer tensors, with ditto's words (the same values and
/// consumption as `bits(t.dims(), t.device(), generator)`). `t` must be contiguous.
#[track_caller]
pub fn bits_(t: &mut Tensor, generator: Option<&Generator>) -> Result<(), RngError> {
    IntoTensor::reserving(t, generator)
        .run(Bits { op: "bits_" })
        .map(|_| ())
}

/// Element `i` is word `i`.
pub(crate) struct Bits {
    op: &'static str,
}

impl PerWordSampler for Bits {
    type Elem = u32;
    fn name(&self) -> &'static str {
        self.op
    }
    #[inline(always)]
    fn element(&self, word: u32) -> u32 {
        word
    }
    #[cfg(feature = "cuda")]
    fn cuda_kernel(&mut self) -> kernels::Result<Option<kernels::KernelCall<'_>>> {
        Ok(Some(kernels::launch::bits_call()))
    }
}

#[cfg(test)]
pub(crate) mod samplers {
    //! The sampler, for the SIMD-versus-scalar tests.
    pub(crate) fn bits() -> super::Bits {
        super::Bits { op: "bits" }
    }
}
