//! # cuda-runtime: the CUDA runtime ditto's kernels run on
//!
//! ```text
//! cuda-runtime  <- you are here: contexts and streams, the caching allocator, pinned
//!      ^           staging, graph capture, NVRTC and the module cache, cuBLAS handles
//!      |
//! tensor-core   tensors; the training ops' kernels (CudaStorage is a tensor's buffer)
//!      ^
//! kernels       the random kernels (rand, normal, dropout) and their launchers
//! ```
//!
//! Everything both kinds of kernels need from CUDA is here, once: one context and one
//! stream per device (the device's primary context, as PyTorch uses), a caching
//! allocator with PyTorch's statistics and graph pools, pinned staging for uploads,
//! CUDA graph capture and replay, NVRTC with ditto's compile options and a per-device
//! module cache, and one cuBLAS handle per device. It knows nothing of tensors: blocks
//! are bytes, and errors are [`CudaError`], which tensor-core turns into its own.
//!
//! Built with cudarc's `dynamic-loading`, so it compiles on machines with no CUDA and
//! looks for the driver only at run time. cudarc panics when a CUDA library is missing;
//! every entry point first checks that the library loads ([`guarded`]) and otherwise
//! returns [`CudaError::Unavailable`]. Without the `cuda` feature only the errors and
//! the probes that answer "no GPU" ([`device_count`], [`is_available`], ...) remain.

#![warn(missing_docs)]

mod error;
pub use error::{CudaError, NvrtcError, Result};

#[cfg(feature = "cuda")]
pub mod allocator;
#[cfg(feature = "cuda")]
mod capture_state;
#[cfg(feature = "cuda")]
pub mod cublas;
#[cfg(feature = "cuda")]
pub mod graph;
#[cfg(feature = "cuda")]
pub mod module_cache;
#[cfg(feature = "cuda")]
pub mod nvrtc;
#[cfg(feature = "cuda")]
mod registry;
#[cfg(feature = "cuda")]
pub mod staging;

#[cfg(feature = "cuda")]
pub use allocator::{
    empty_cache, max_memory_allocated, memory_allocated, memory_reserved, memory_stats,
    reset_peak_memory_stats, MemoryStats,
};
#[cfg(feature = "cuda")]
pub use graph::{is_capturing, refuse_during_capture, CudaGraph};
#[cfg(feature = "cuda")]
pub use module_cache::CudaSource;
#[cfg(feature = "cuda")]
pub use registry::{
    context, default_stream, device_count, driver_version, get_device_name, guarded, is_available,
    sm_count, synchronize, MIN_DRIVER_VERSION,
};

/// The cudarc version the runtime is built with, so other crates name the same types.
#[cfg(feature = "cuda")]
pub use cudarc;

/// Wraps a cudarc driver error with the device and the operation that failed.
#[cfg(feature = "cuda")]
pub fn driver_error(
    ordinal: usize,
    op: &'static str,
) -> impl FnOnce(cudarc::driver::DriverError) -> CudaError {
    move |e| CudaError::Driver {
        ordinal,
        op,
        message: e.to_string(),
    }
}

#[cfg(not(feature = "cuda"))]
mod disabled;
#[cfg(not(feature = "cuda"))]
pub use disabled::{device_count, disabled, get_device_name, is_available, synchronize};
