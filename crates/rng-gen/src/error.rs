//! The one error type of rng-gen.

use tensor_core::{DType, Device, TensorError};

/// Everything that can go wrong in rng-gen: bad arguments to a random op, a state that
/// cannot be restored, a device that does not exist, or an error from tensor-core.
///
/// Arguments are checked before any randomness is reserved, so a failed op never moves
/// a generator, and CPU and CUDA report the same error for the same call.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum RngError {
    /// An error from tensor-core (shape overflow, allocation, CUDA, ...).
    #[error(transparent)]
    Tensor(#[from] TensorError),
    /// A probability outside [0, 1], or NaN.
    #[error("{op}: probability must be in [0, 1], got {p}")]
    InvalidProbability {
        /// The operation.
        op: &'static str,
        /// The probability given.
        p: f64,
    },
    /// A floating-point range that is empty, not finite, or not representable in the
    /// output dtype.
    #[error("{op}: invalid range [{low}, {high}) for {dtype}: {reason}")]
    InvalidRange {
        /// The operation.
        op: &'static str,
        /// Lower bound given.
        low: f64,
        /// Upper bound given.
        high: f64,
        /// The output dtype.
        dtype: DType,
        /// What was wrong (expected: finite, `low < high`, representable).
        reason: &'static str,
    },
    /// An integer range `[low, high)` with no values in it.
    #[error("{op}: empty range [{low}, {high}): expected low < high")]
    EmptyRange {
        /// The operation.
        op: &'static str,
        /// Lower bound (inclusive).
        low: i64,
        /// Upper bound (exclusive).
        high: i64,
    },
    /// A standard deviation that is negative or not finite.
    #[error("{op}: std must be finite and >= 0, got {std}")]
    InvalidStd {
        /// The operation.
        op: &'static str,
        /// The standard deviation given.
        std: f64,
    },
    /// A mean that is not finite (in the output precision).
    #[error("{op}: mean must be finite, got {mean}")]
    InvalidMean {
        /// The operation.
        op: &'static str,
        /// The mean given.
        mean: f64,
    },
    /// An op asked for a dtype it cannot produce or consume.
    #[error("{op} does not support dtype {dtype}; supported: {supported}")]
    UnsupportedDType {
        /// The operation.
        op: &'static str,
        /// The dtype given.
        dtype: DType,
        /// The dtypes it does support.
        supported: &'static str,
    },
    /// A generator of one device was passed to an op on another (as in PyTorch).
    #[error(
        "{op}: a generator for {generator} cannot drive an op on {requested}; \
         pass a generator created for {requested}"
    )]
    GeneratorDeviceMismatch {
        /// The operation.
        op: &'static str,
        /// The generator's device.
        generator: Device,
        /// The device the op runs on.
        requested: Device,
    },
    /// A CUDA device index that does not exist in this process (or this build).
    #[error("no such device {device}: {available} CUDA device(s) available")]
    NoSuchDevice {
        /// The device asked for.
        device: Device,
        /// How many CUDA devices exist.
        available: usize,
    },
    /// `set_rng_state_all` got a different number of states than there are devices.
    #[error("expected one state per CUDA device ({expected}), got {got}")]
    DeviceCountMismatch {
        /// CUDA devices present.
        expected: usize,
        /// States given.
        got: usize,
    },
    /// State bytes of the wrong length.
    #[error("generator state has {got} bytes, expected {expected}")]
    WrongLength {
        /// Bytes a state of this kind has.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// State bytes that do not start with ditto's magic.
    #[error("not a ditto generator state: starts with {found:02x?}, expected b\"DTRNG\"")]
    BadMagic {
        /// The first bytes found.
        found: Vec<u8>,
    },
    /// State bytes of a format version this build cannot read.
    #[error(
        "generator state version {found} is not supported (this build reads version {supported})"
    )]
    UnsupportedVersion {
        /// Version in the bytes.
        found: u16,
        /// Version this build reads.
        supported: u16,
    },
    /// State bytes of the other kind (a `PhiloxRng` state given to a `Generator`, or
    /// the reverse).
    #[error("generator state is of kind {found}, expected kind {expected} (1 = Generator, 2 = PhiloxRng)")]
    WrongStateKind {
        /// Kind byte expected.
        expected: u8,
        /// Kind byte found.
        found: u8,
    },
    /// State bytes whose CRC-32 does not match: the bytes were corrupted.
    #[error("generator state is corrupted: CRC-32 {found:#010x}, computed {computed:#010x}")]
    ChecksumMismatch {
        /// CRC stored in the bytes.
        found: u32,
        /// CRC of the bytes as read.
        computed: u32,
    },
    /// State bytes that are well formed but describe an impossible state.
    #[error("generator state is inconsistent: {reason}")]
    InconsistentState {
        /// What does not add up.
        reason: &'static str,
    },
    /// `dropout_backward` got a gradient whose size differs from the forward input.
    #[error("dropout_backward: gradient has {got} elements, the forward input had {expected}")]
    DropoutSizeMismatch {
        /// Elements of the forward input.
        expected: u64,
        /// Elements of the gradient.
        got: u64,
    },
    /// `dropout_rows` got rows that do not fit the batch (or its input is not a batch
    /// of those rows).
    #[error("{op}: {reason}")]
    InvalidRows {
        /// The op.
        op: &'static str,
        /// What does not fit, and what was expected.
        reason: String,
    },
    /// `causal_attention` got operands, a gradient or dropout rows of the wrong shape.
    #[error("{op}: {reason}")]
    InvalidAttention {
        /// The op.
        op: &'static str,
        /// What does not fit, and what was expected.
        reason: String,
    },
    /// A CUDA graph capture rule was broken for a generator (`rng_gen::graph`): its seed
    /// or state set, read or reserved from by hand during a capture that draws from it,
    /// a second thread drawing from it meanwhile, or a random op the graph cannot hold.
    #[error("CUDA graph capture: {op} {reason}")]
    Capture {
        /// What was attempted.
        op: &'static str,
        /// Why that is not allowed during a capture, and what to do instead.
        reason: String,
    },
}
