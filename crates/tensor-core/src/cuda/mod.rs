//! CUDA support: the per-device context registry, device buffers, and run-time kernel
//! compilation (NVRTC and a per-device module cache) shared with the `kernels` crate.
//!
//! Built with cudarc's `dynamic-loading`, so this compiles on machines with no CUDA and
//! looks for the driver only at run time. cudarc panics when a CUDA library is missing;
//! every entry point here first checks that the driver library loads and otherwise
//! returns [`crate::TensorError::CudaUnavailable`] with the
//! reason "no CUDA driver found". Nothing in this module panics without a GPU.

mod copy;
pub mod module_cache;
pub mod nvrtc;
mod registry;
mod storage;

pub use module_cache::CudaSource;
pub use registry::{context, default_stream, device_count, is_available, sm_count, synchronize};
pub use storage::CudaStorage;

use crate::TensorError;

/// Wraps a cudarc driver error with the device and the operation that failed.
pub(crate) fn driver_error(
    ordinal: usize,
    op: &'static str,
) -> impl FnOnce(cudarc::driver::DriverError) -> TensorError {
    move |e| TensorError::Cuda {
        ordinal,
        op,
        message: e.to_string(),
    }
}
