//! The one error type of kernels.

use tensor_core::{NvrtcError, TensorError};

/// Everything that can go wrong between "run this random op on the GPU" and the kernel
/// having been queued: no NVRTC to compile with, a compile failure, a failed launch, or
/// an error from tensor-core (no driver, no such device, allocation).
///
/// Nothing in this crate panics when CUDA is absent: every missing piece becomes one of
/// these.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum KernelError {
    /// No NVRTC to compile with, or NVRTC rejected the sources (with its log).
    #[error(transparent)]
    Nvrtc(#[from] NvrtcError),
    /// Loading a module, finding a kernel or launching it failed.
    #[error("CUDA device {ordinal}: {kernel}: {message}")]
    Launch {
        /// The device.
        ordinal: usize,
        /// The kernel (or "module" for loading the compiled module).
        kernel: String,
        /// The driver's message.
        message: String,
    },
    /// A launcher was called with arguments that do not fit together (lengths, dtypes).
    #[error("{op}: {message}")]
    InvalidArgument {
        /// The launcher.
        op: &'static str,
        /// What was wrong and what was expected.
        message: String,
    },
    /// An error from tensor-core: no CUDA driver, no such device, allocation failure.
    #[error(transparent)]
    Tensor(TensorError),
}

/// NVRTC failures stay `Nvrtc` even when they come through tensor-core's module cache,
/// so callers can tell "no NVRTC" from "no GPU".
impl From<TensorError> for KernelError {
    fn from(e: TensorError) -> Self {
        match e {
            TensorError::Nvrtc(n) => n.into(),
            other => KernelError::Tensor(other),
        }
    }
}

/// The runtime's errors (module cache, NVRTC, device queries) as tensor-core reports
/// them, NVRTC's kept apart as above.
impl From<cuda_runtime::CudaError> for KernelError {
    fn from(e: cuda_runtime::CudaError) -> Self {
        TensorError::from(e).into()
    }
}

/// Shorthand for results in kernels.
pub type Result<T, E = KernelError> = std::result::Result<T, E>;

impl KernelError {
    /// This error as a tensor-core error for device `ordinal`, for crates above (rng-gen)
    /// that report `TensorError`s: a missing NVRTC becomes `CudaUnavailable` (the device
    /// cannot run ditto's kernels), compile and launch failures become `Cuda` errors,
    /// each keeping its message.
    #[must_use]
    pub fn into_tensor_error(self, ordinal: usize) -> TensorError {
        match self {
            KernelError::Tensor(t) => t,
            KernelError::InvalidArgument { op, message } => {
                TensorError::InvalidArgument { op, message }
            }
            e @ KernelError::Nvrtc(NvrtcError::Unavailable(_)) => TensorError::CudaUnavailable {
                ordinal,
                reason: e.to_string(),
            },
            KernelError::Nvrtc(e) => TensorError::Cuda {
                ordinal,
                op: "kernel compile",
                message: e.to_string(),
            },
            KernelError::Launch {
                ordinal,
                kernel,
                message,
            } => TensorError::Cuda {
                ordinal,
                op: "kernel launch",
                message: format!("{kernel}: {message}"),
            },
        }
    }
}
