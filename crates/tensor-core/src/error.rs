//! The one error type of tensor-core.

use cuda_runtime::{CudaError, NvrtcError};

use crate::{DType, Device};

/// Shorthand for results in tensor-core.
pub type Result<T, E = TensorError> = std::result::Result<T, E>;

/// Everything that can go wrong with user input to a tensor operation.
///
/// Each message says what was given and what was expected.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum TensorError {
    /// The product of the dimensions does not fit in `usize`.
    #[error("shape {dims:?} has more elements than fit in usize")]
    ShapeOverflow {
        /// The dimensions given.
        dims: Vec<usize>,
    },
    /// A buffer's length does not match the element count of the shape.
    #[error("shape {dims:?} needs {expected} elements but {got} were given")]
    ElementCountMismatch {
        /// The dimensions given.
        dims: Vec<usize>,
        /// Elements the shape needs.
        expected: usize,
        /// Elements supplied.
        got: usize,
    },
    /// Two shapes that must agree (or broadcast) do not.
    #[error("shape mismatch in {op}: {lhs:?} vs {rhs:?}")]
    ShapeMismatch {
        /// The operation.
        op: &'static str,
        /// Left operand's dims.
        lhs: Vec<usize>,
        /// Right operand's dims.
        rhs: Vec<usize>,
    },
    /// A dimension index is out of range.
    #[error("{op}: dimension {dim} is out of range for a tensor of rank {rank}")]
    DimOutOfRange {
        /// The operation.
        op: &'static str,
        /// The dimension asked for.
        dim: usize,
        /// The tensor's rank.
        rank: usize,
    },
    /// An operation expected a tensor of a different rank.
    #[error("{op} expects a tensor of rank {expected}, got rank {got}")]
    RankMismatch {
        /// The operation.
        op: &'static str,
        /// The rank needed.
        expected: usize,
        /// The rank given.
        got: usize,
    },
    /// A dtype that does not match the one required.
    #[error("{op}: expected dtype {expected}, got {got}")]
    DTypeMismatch {
        /// The operation.
        op: &'static str,
        /// The dtype needed.
        expected: DType,
        /// The dtype given.
        got: DType,
    },
    /// An operation does not support this dtype at all.
    #[error("{op} does not support dtype {dtype}; supported: {supported}")]
    UnsupportedDType {
        /// The operation.
        op: &'static str,
        /// The dtype given.
        dtype: DType,
        /// The dtypes it does support, for the message.
        supported: &'static str,
    },
    /// Operands live on different devices.
    #[error("{op}: operands are on different devices ({lhs} and {rhs})")]
    DeviceMismatch {
        /// The operation.
        op: &'static str,
        /// First device.
        lhs: Device,
        /// Second device.
        rhs: Device,
    },
    /// A device string could not be parsed.
    #[error("invalid device {given:?}: expected \"cpu\", \"cuda\" or \"cuda:N\"")]
    InvalidDevice {
        /// The text given.
        given: String,
    },
    /// The CUDA runtime failed: no such device or driver, a driver too old, a failed
    /// driver or cuBLAS call, a broken graph-capture rule, or NVRTC. One variant holds
    /// the runtime's own error, so a caller matches the same value whichever layer
    /// failed (`TensorError::Cuda(CudaError::Capture { .. })`).
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// An operation that is not (yet) implemented for a device.
    #[error("{op} is not implemented on {device}")]
    NotImplementedOnDevice {
        /// The operation.
        op: &'static str,
        /// The device.
        device: Device,
    },
    /// A numeric argument outside its valid range.
    #[error("{op}: invalid argument: {message}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What was wrong and what was expected.
        message: String,
    },
    /// An op was asked for its nondeterministic fast path while
    /// `use_deterministic_algorithms(DeterministicMode::Error)` is set (the message
    /// follows PyTorch's).
    #[error(
        "{op} on {device} was asked for its nondeterministic fast path, but \
         use_deterministic_algorithms(DeterministicMode::Error) is set; use {alternative}, \
         or set DeterministicMode::Warn if a nondeterministic result is acceptable for \
         your application"
    )]
    NondeterministicOp {
        /// The op, as a user wrote it.
        op: &'static str,
        /// Where it would have run.
        device: Device,
        /// How to get the deterministic path instead.
        alternative: &'static str,
    },
    /// An index (into a dimension or a list) is out of range.
    #[error("{op}: index {index} is out of range for dimension {dim} of size {size}")]
    IndexOutOfRange {
        /// The operation.
        op: &'static str,
        /// The index given.
        index: usize,
        /// The dimension it indexes.
        dim: usize,
        /// The size of that dimension (valid indices are `0..size`).
        size: usize,
    },
    /// An element of an index tensor is outside the dimension it indexes (negative
    /// values are out of range too: index tensors are not wrapped).
    #[error(
        "{op}: index[{position}] = {value} is out of range for dimension {dim} of size \
         {size} (expected 0 <= index < {size})"
    )]
    IndexValueOutOfRange {
        /// The operation.
        op: &'static str,
        /// Where in the index tensor (row-major element number).
        position: usize,
        /// The value found there.
        value: i64,
        /// The dimension it indexes.
        dim: usize,
        /// The size of that dimension.
        size: usize,
    },
    /// An operation that needs exactly one element got a different count.
    #[error("{op} expects a tensor with exactly one element, got shape {dims:?}")]
    NotAScalar {
        /// The operation.
        op: &'static str,
        /// The tensor's dims.
        dims: Vec<usize>,
    },
    /// An operation that needs a contiguous (row-major, gap-free) tensor got a strided view.
    #[error(
        "{op} expects a contiguous tensor, got dims {dims:?} with strides {strides:?}; \
         call .contiguous() first"
    )]
    NotContiguous {
        /// The operation.
        op: &'static str,
        /// The tensor's dims.
        dims: Vec<usize>,
        /// The tensor's strides.
        strides: Vec<usize>,
    },
    /// An operation that needs its tensor on one particular device got another.
    #[error("{op} expects a tensor on {expected}, got one on {got}")]
    WrongDevice {
        /// The operation.
        op: &'static str,
        /// The device needed.
        expected: Device,
        /// The device given.
        got: Device,
    },
    /// The audit could not open, write or read a trace.
    #[error("audit: {message}")]
    Audit {
        /// What failed, with the file and the system's reason.
        message: String,
    },
    /// The device ran out of memory during a CUDA graph capture of it. Unlike eager
    /// code, a capture cannot give the allocator's cache back to make room (the frees
    /// would be recorded into the graph), so the cache is kept, as the statistics say.
    #[error(
        "out of memory on cuda:{ordinal} during a CUDA graph capture of it: {elements} \
         elements of {dtype} ({bytes} bytes) do not fit beside the {cached_bytes} bytes \
         the allocator's cache holds, which a capture cannot give back; call empty_cache \
         before the capture, or capture less"
    )]
    CaptureOutOfMemory {
        /// The device being captured.
        ordinal: usize,
        /// Element type asked for.
        dtype: DType,
        /// Element count asked for.
        elements: usize,
        /// Bytes asked of the driver (the request's size class).
        bytes: u64,
        /// Bytes of free blocks the allocator's cache held at the time.
        cached_bytes: u64,
    },
    /// A buffer could not be allocated (too large for the address space or the allocator).
    #[error("could not allocate {elements} elements of {dtype} on {device}")]
    AllocationFailed {
        /// Where.
        device: Device,
        /// Element type.
        dtype: DType,
        /// Element count asked for.
        elements: usize,
    },
}

impl From<NvrtcError> for TensorError {
    fn from(e: NvrtcError) -> Self {
        TensorError::Cuda(CudaError::Nvrtc(e))
    }
}
