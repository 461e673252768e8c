//! nn-mini's one error type, and the conversions from the crates below it.

use crate::checkpoint::CheckpointError;
use rng_gen::RngError;
use tensor_core::TensorError;

/// Shorthand for results in nn-mini.
pub type Result<T, E = NnError> = std::result::Result<T, E>;

/// Everything that can go wrong in a layer, loss, optimiser, data loader, checkpoint or
/// training loop. Errors from tensor-core, rng-gen and checkpoints pass through unchanged,
/// so a caller can still match on the precise low-level cause.
///
/// One error, one path: a [`TensorError`] always arrives as [`NnError::Tensor`], never
/// wrapped in [`NnError::Rng`] or [`NnError::Checkpoint`] (the `From` conversions unwrap
/// it), so `matches!(e, NnError::Tensor(..))` catches every tensor error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NnError {
    /// A tensor operation rejected its input.
    #[error(transparent)]
    Tensor(#[from] TensorError),
    /// A random op or generator rejected its input.
    #[error(transparent)]
    Rng(RngError),
    /// A checkpoint could not be written, read or applied.
    #[error(transparent)]
    Checkpoint(CheckpointError),
    /// A constructor or method argument outside its valid range.
    #[error("{op}: invalid argument: {message}")]
    InvalidArgument {
        /// Where.
        op: &'static str,
        /// What was wrong and what was expected.
        message: String,
    },
    /// `backward` was called on a layer with no saved forward pass (never run, run in
    /// eval mode, or already consumed by an earlier `backward`).
    #[error("{layer}.backward called without a preceding forward(train = true)")]
    BackwardWithoutForward {
        /// The layer's type name.
        layer: &'static str,
    },
    /// A class target is not a valid class index for the logits it is compared with.
    #[error("{op}: target {target} at row {row} is not a class index in [0, {classes})")]
    InvalidTarget {
        /// The loss.
        op: &'static str,
        /// Row of the batch.
        row: usize,
        /// The target given.
        target: i64,
        /// Number of classes (columns of the logits).
        classes: usize,
    },
    /// A dataset call panicked while the loader was loading a batch; the panic is turned
    /// into an error so the training loop can report it instead of hanging or aborting.
    #[error(
        "dataset panicked while loading batch {batch} of epoch {epoch} ({}): {message}",
        match worker { Some(w) => format!("worker {w}"), None => "calling thread".to_string() }
    )]
    WorkerPanicked {
        /// The worker thread's number; `None` when loading on the calling thread
        /// (`num_workers = 0`).
        worker: Option<usize>,
        /// Epoch of the batch.
        epoch: u64,
        /// Batch index within the epoch.
        batch: u64,
        /// The panic payload, when it was a string.
        message: String,
    },
    /// The data-loader workers are gone (a thread could not be spawned or exited).
    #[error("data loader workers are unavailable: {reason}")]
    WorkersUnavailable {
        /// What happened.
        reason: String,
    },
    /// A loader state does not fit the loader it is applied to (another dataset length,
    /// batch size, ...), or its bytes are not a loader state.
    #[error("invalid data loader state: {reason}")]
    InvalidLoaderState {
        /// What does not match or parse.
        reason: String,
    },
    /// A data-loader setting past one of its documented limits (see [`crate::data`]).
    #[error("data loader: {what} is {value}, more than the limit of {limit} (nn_mini::data::{constant})")]
    LoaderLimit {
        /// The quantity.
        what: &'static str,
        /// Its value (wide enough that a product of two `usize`s never overflows).
        value: u128,
        /// The limit.
        limit: u64,
        /// The name of the constant holding the limit.
        constant: &'static str,
    },
    /// The loader delivered the last batch of the last epoch (`u64::MAX - 1`), or was
    /// restored to a state past it; epoch numbers do not wrap around.
    #[error(
        "data loader: every epoch up to u64::MAX - 1 has been delivered; epoch numbers do \
         not wrap around to 0"
    )]
    EpochsExhausted,
    /// A checkpoint saved under one arithmetic (portable or default, see
    /// `tensor_core::use_portable_arithmetic`) resumed under the other: the remaining
    /// curve would silently be another run's.
    #[error(
        "this checkpoint was saved with portable arithmetic {}, but this process has it {}; \
         call tensor_core::use_portable_arithmetic({saved}) before resuming (the demos: {})",
        if *saved { "on" } else { "off" },
        if *current { "on" } else { "off" },
        if *saved { "add --portable" } else { "drop --portable" }
    )]
    ArithmeticMismatch {
        /// Whether the run that saved it had portable arithmetic on.
        saved: bool,
        /// Whether this process has it on.
        current: bool,
    },
    /// A training step produced a loss or gradient norm that is NaN or infinite: the
    /// run has diverged (most often the learning rate is too high) and every later step
    /// would only carry the NaN on. Reported at the first step it appeared.
    #[error(
        "step {step}: the {what} is {value}, not a finite number (the first non-finite {what} \
         of the run); the run has diverged, most often because the learning rate is too high"
    )]
    NonFinite {
        /// The step (1-based) whose loss or gradients were not finite.
        step: u64,
        /// `loss` or `gradient norm`.
        what: &'static str,
        /// The value.
        value: f64,
    },
    /// An I/O error outside checkpoints (e.g. writing a loss file).
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl From<RngError> for NnError {
    fn from(e: RngError) -> Self {
        match e {
            RngError::Tensor(e) => NnError::Tensor(e),
            e => NnError::Rng(e),
        }
    }
}

impl From<CheckpointError> for NnError {
    fn from(e: CheckpointError) -> Self {
        match e {
            CheckpointError::Tensor(e) => NnError::Tensor(e),
            e => NnError::Checkpoint(e),
        }
    }
}

impl NnError {
    /// An [`NnError::InvalidArgument`].
    pub(crate) fn invalid(op: &'static str, message: impl Into<String>) -> Self {
        NnError::InvalidArgument {
            op,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tensor error reaches `NnError` as `NnError::Tensor` whichever layer it passed.
    #[test]
    fn a_tensor_error_takes_one_path() {
        let tensor = || TensorError::ShapeOverflow { dims: vec![0] };
        let via_rng = NnError::from(RngError::Tensor(tensor()));
        let via_checkpoint = NnError::from(CheckpointError::Tensor(tensor()));
        let via_loader_entry = NnError::from(CheckpointError::loader(
            "loader.state",
            NnError::Tensor(tensor()),
        ));
        let via_generator_entry = NnError::from(CheckpointError::generator(
            "rng.x",
            RngError::Tensor(tensor()),
        ));
        for e in [
            via_rng,
            via_checkpoint,
            via_loader_entry,
            via_generator_entry,
        ] {
            assert!(matches!(e, NnError::Tensor(_)), "{e:?}");
        }
        // Other errors keep their layer, and their source (`transparent` forwards
        // `source` to the checkpoint error's, rng-gen's error).
        let e = NnError::from(CheckpointError::generator(
            "rng.x",
            RngError::WrongLength {
                expected: 28,
                got: 3,
            },
        ));
        assert!(matches!(
            e,
            NnError::Checkpoint(CheckpointError::Generator { .. })
        ));
        let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<RngError>());
        assert!(
            matches!(source, Some(RngError::WrongLength { .. })),
            "{e:?}"
        );
    }
}
