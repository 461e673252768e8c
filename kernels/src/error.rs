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
    /// The NVRTC library could not be loaded, so kernels cannot be compiled.
    #[error(
        "no NVRTC library found ({0}); install nvidia-cuda-nvrtc==13.0.88 \
         (scripts/install_cuda_wheels.sh) and set LD_LIBRARY_PATH to its nvidia/cu13/lib"
    )]
    NvrtcUnavailable(String),
    /// NVRTC rejected the kernel sources for `arch`; `log` is its compile log.
    #[error("NVRTC failed to compile ditto's kernels for {arch}:\n{log}")]
    Compile {
        /// The `--gpu-architecture` value compiled for.
        arch: String,
        /// NVRTC's log (or the error when no log was produced).
        log: String,
    },
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

impl From<NvrtcError> for KernelError {
    fn from(e: NvrtcError) -> Self {
        match e {
            NvrtcError::Unavailable(why) => KernelError::NvrtcUnavailable(why),
            NvrtcError::Compile { arch, log, .. } => KernelError::Compile { arch, log },
            // NvrtcError is non_exhaustive: keep any future variant's message.
            other => KernelError::Compile {
                arch: String::new(),
                log: other.to_string(),
            },
        }
    }
}

/// NVRTC failures keep their own variants even when they come through tensor-core's
/// module cache, so callers can tell "no NVRTC" from "no GPU".
impl From<TensorError> for KernelError {
    fn from(e: TensorError) -> Self {
        match e {
            TensorError::Nvrtc(n) => n.into(),
            other => KernelError::Tensor(other),
        }
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
            e @ KernelError::NvrtcUnavailable(_) => TensorError::CudaUnavailable {
                ordinal,
                reason: e.to_string(),
            },
            e @ KernelError::Compile { .. } => TensorError::Cuda {
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
