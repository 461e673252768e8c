//! The random kernels on a device, through tensor-core's per-device module cache.

use cudarc::driver::CudaFunction;

use crate::error::Result;
use crate::nvrtc::RANDOM_SOURCE;

/// The kernel `name` on device `ordinal`, compiling the random kernels first if needed.
pub fn function(ordinal: usize, name: &str) -> Result<CudaFunction> {
    Ok(tensor_core::cuda::module_cache::function(
        ordinal,
        &RANDOM_SOURCE,
        name,
    )?)
}

/// Streaming multiprocessors on device `ordinal`.
pub fn sm_count(ordinal: usize) -> Result<u32> {
    Ok(tensor_core::cuda::sm_count(ordinal)?)
}
