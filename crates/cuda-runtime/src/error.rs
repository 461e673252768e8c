//! The runtime's error type. tensor-core's `TensorError::Cuda` holds it as it is, so a
//! user matches the same value whichever layer failed.

/// Shorthand for results in cuda-runtime.
pub type Result<T, E = CudaError> = std::result::Result<T, E>;

/// What can go wrong asking the CUDA driver, NVRTC or cuBLAS for something.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum CudaError {
    /// The requested device does not exist, or no (usable) driver or library is present.
    #[error("CUDA device {ordinal} is not available: {reason}")]
    Unavailable {
        /// The ordinal asked for.
        ordinal: usize,
        /// Why: no driver, no library, or how many devices there are.
        reason: String,
    },
    /// The NVIDIA driver is older than the CUDA libraries ditto loads need: found and
    /// needed are `cuDriverGetVersion` numbers (1000 x major + 10 x minor, 12040 = 12.4).
    #[error(
        "CUDA device {ordinal}: the NVIDIA driver supports CUDA {}.{}, but ditto's CUDA \
         libraries (NVRTC, cuBLAS and NCCL of CUDA 13) need a driver for CUDA {}.{} or later \
         (driver 580 or newer); upgrade the driver, or install CUDA's forward-compatibility \
         package (cuda-compat) where the data centre driver line allows it",
        found / 1000, found % 1000 / 10, needed / 1000, needed % 1000 / 10
    )]
    DriverTooOld {
        /// The ordinal asked for.
        ordinal: usize,
        /// The CUDA version the installed driver supports.
        found: i32,
        /// The oldest driver CUDA version ditto's libraries run on.
        needed: i32,
    },
    /// A driver or cuBLAS call failed.
    #[error("CUDA error on device {ordinal} in {op}: {message}")]
    Driver {
        /// The device.
        ordinal: usize,
        /// What was being done.
        op: &'static str,
        /// The driver's message.
        message: String,
    },
    /// Something a CUDA graph capture of the device does not allow.
    #[error("CUDA graph capture on cuda:{ordinal}: {op} {reason}")]
    Capture {
        /// The device being captured.
        ordinal: usize,
        /// What was attempted.
        op: &'static str,
        /// Why that is not allowed, and what to do instead.
        reason: String,
    },
    /// The driver had no memory left for a block of `bytes`, even after the allocator's
    /// cache was given back (outside a capture; during one it cannot be, and
    /// `cached_bytes` says how much it holds).
    #[error("out of memory on cuda:{ordinal}: {bytes} bytes")]
    OutOfMemory {
        /// The device.
        ordinal: usize,
        /// Bytes asked of the driver (the request's size class).
        bytes: u64,
        /// `Some(bytes held by the cache)` when the device was being captured.
        during_capture: Option<u64>,
    },
    /// NVRTC could not compile (or is missing).
    #[error(transparent)]
    Nvrtc(#[from] NvrtcError),
}

/// What can go wrong compiling CUDA sources with NVRTC. Kept apart from
/// `TensorError` so crates that compile their own sources (kernels) can report it in
/// their own error type without losing the distinction.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NvrtcError {
    /// The NVRTC library could not be loaded, so nothing can be compiled.
    #[error(
        "no NVRTC library found ({0}); install nvidia-cuda-nvrtc==13.0.88 \
         (scripts/install_cuda_wheels.sh) and set LD_LIBRARY_PATH to its nvidia/cu13/lib"
    )]
    Unavailable(String),
    /// NVRTC rejected the sources of `module` for `arch`; `log` is its compile log.
    #[error("NVRTC failed to compile {module} for {arch}:\n{log}")]
    Compile {
        /// The source file name given to NVRTC (e.g. `ditto_random.cu`).
        module: String,
        /// The `--gpu-architecture` value compiled for.
        arch: String,
        /// NVRTC's log (or the error when no log was produced).
        log: String,
    },
}
