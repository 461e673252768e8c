//! The one error type of kernels.

use tensor_core::{CudaError, NvrtcError, TensorError};

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
            TensorError::Cuda(CudaError::Nvrtc(n)) => n.into(),
            other => KernelError::Tensor(other),
        }
    }
}

/// The runtime's errors (module cache, NVRTC, device queries) as tensor-core reports
/// them, NVRTC's kept apart as above.
impl From<CudaError> for KernelError {
    fn from(e: CudaError) -> Self {
        TensorError::from(e).into()
    }
}

/// Shorthand for results in kernels.
pub type Result<T, E = KernelError> = std::result::Result<T, E>;

impl KernelError {
    /// This error as a tensor-core error for device `ordinal`, for crates above (rng-gen)
    /// that report `TensorError`s: a missing NVRTC becomes `CudaError::Unavailable` (the device
    /// cannot run ditto's kernels), compile and launch failures become `CudaError::Driver` errors,
    /// each keeping its message.
    #[must_use]
    pub fn into_tensor_error(self, ordinal: usize) -> TensorError {
        let cuda = match self {
            KernelError::Tensor(t) => return t,
            KernelError::InvalidArgument { op, message } => {
                return TensorError::InvalidArgument { op, message }
            }
            e @ KernelError::Nvrtc(NvrtcError::Unavailable(_)) => CudaError::Unavailable {
                ordinal,
                reason: e.to_string(),
            },
            KernelError::Nvrtc(e) => CudaError::Driver {
                ordinal,
                op: "kernel compile",
                message: e.to_string(),
            },
            KernelError::Launch {
                ordinal,
                kernel,
                message,
            } => CudaError::Driver {
                ordinal,
                op: "kernel launch",
                message: format!("{kernel}: {message}"),
            },
        };
        TensorError::Cuda(cuda)
    }
}
