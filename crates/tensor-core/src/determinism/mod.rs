//! The process-wide deterministic-algorithms switch (docs/determinism.md#the-switch),
//! PyTorch's `torch.use_deterministic_algorithms` in Rust form.
//!
//! Random ops in ditto are deterministic by construction. What is not: an op whose
//! *fast* path lets timing decide the result, such as GPU atomics accumulating floats in
//! arrival order, CPU threads adding into shared rows as they get to them, or a data
//! loader delivering batches in the order workers finish. Each such op has a
//! deterministic path too, and a [`FastPath`] entry describing both; the switch and the
//! caller's [`Algorithm`] decide which one runs:
//!
//! | mode    | `Algorithm::Auto` (the default)           | `Algorithm::Fast` (asked for explicitly)  |
//! |---------|-------------------------------------------|-------------------------------------------|
//! | `Off`   | the fast path, where it pays off           | the fast path                              |
//! | `Warn`  | the deterministic path                    | the fast path, with one warning per op     |
//! | `Error` | the deterministic path                    | [`TensorError::NondeterministicOp`]         |
//!
//! `Algorithm::Deterministic` always runs the deterministic path. As in PyTorch, `Warn`
//! and `Error` both *enable* deterministic algorithms
//! ([`are_deterministic_algorithms_enabled`]); they differ only for a nondeterministic
//! path the program insists on, which `Warn` lets through with a warning and `Error`
//! refuses. The table of every op with a fast path is [`paths::TENSOR_OPS`] (and the
//! facade's `ditto::nondeterministic_ops`, which adds the data loader's).

pub mod paths;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use crate::{Device, TensorError};

pub use paths::{markdown_table, FastPath};

/// What ops with a nondeterministic fast path do. See the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeterministicMode {
    /// Fast paths allowed, silently (the default, as in PyTorch).
    #[default]
    Off,
    /// Deterministic paths by default; a fast path asked for explicitly runs with one
    /// warning per op (PyTorch's `warn_only=True`).
    Warn,
    /// Deterministic paths by default; a fast path asked for explicitly is an error.
    Error,
}

/// Which implementation an op with a nondeterministic fast path should run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub enum Algorithm {
    /// Let the switch decide: the fast path in `Off` mode where it pays off, the
    /// deterministic path in `Warn` and `Error` mode.
    #[default]
    Auto,
    /// Always the deterministic path (results independent of threads, launch
    /// configuration and timing).
    Deterministic,
    /// The nondeterministic fast path: runs in `Off`, warns once per op in `Warn`, and
    /// fails with [`TensorError::NondeterministicOp`] in `Error`.
    Fast,
}

/// The path an op takes after [`FastPath::choose`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Chosen {
    /// The deterministic path.
    Deterministic,
    /// The nondeterministic fast path.
    Fast,
}

static MODE: AtomicU8 = AtomicU8::new(0);
static WARNED: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);

/// Sets the process-wide mode. Like PyTorch's switch it is global, so set it once at the
/// start of a program, not from concurrently running tests.
pub fn use_deterministic_algorithms(mode: DeterministicMode) {
    let encoded = match mode {
        DeterministicMode::Off => 0,
        DeterministicMode::Warn => 1,
        DeterministicMode::Error => 2,
    };
    MODE.store(encoded, Ordering::SeqCst);
}

/// The current mode.
#[must_use]
pub fn deterministic_mode() -> DeterministicMode {
    match MODE.load(Ordering::Relaxed) {
        0 => DeterministicMode::Off,
        1 => DeterministicMode::Warn,
        _ => DeterministicMode::Error,
    }
}

/// True in `Warn` and `Error` modes (`torch.are_deterministic_algorithms_enabled`).
#[must_use]
pub fn are_deterministic_algorithms_enabled() -> bool {
    deterministic_mode() != DeterministicMode::Off
}

/// True in `Warn` mode (`torch.is_deterministic_algorithms_warn_only_enabled`).
#[must_use]
pub fn is_deterministic_algorithms_warn_only_enabled() -> bool {
    deterministic_mode() == DeterministicMode::Warn
}

/// Called by an op just before it takes a nondeterministic path the caller asked for
/// explicitly (an [`Algorithm::Fast`], or an option such as the loader's
/// `in_order(false)`). `op` names the op as a user wrote it, `device` where it runs,
/// `alternative` how to get the deterministic path. `Off`: nothing; `Warn`: prints the
/// warning the first time `op` gets here; `Error`: returns
/// [`TensorError::NondeterministicOp`].
pub fn check_nondeterministic(
    op: &'static str,
    device: Device,
    alternative: &'static str,
) -> Result<(), TensorError> {
    match deterministic_mode() {
        DeterministicMode::Off => Ok(()),
        DeterministicMode::Warn => {
            if first_warning(op) {
                eprintln!("{}", warning_message(op, device, alternative));
            }
            Ok(())
        }
        DeterministicMode::Error => Err(TensorError::NondeterministicOp {
            op,
            device,
            alternative,
        }),
    }
}

/// The text `Warn` mode prints, modelled on PyTorch's `UserWarning`.
#[must_use]
pub fn warning_message(op: &str, device: Device, alternative: &str) -> String {
    format!(
        "ditto warning: {op} on {device} was asked for its nondeterministic fast path, \
         but use_deterministic_algorithms(DeterministicMode::Warn) is set; running it \
         anyway (this warning is printed once per op). For reproducible results use \
         {alternative}"
    )
}

/// True the first time it is called with `op` in this process.
fn first_warning(op: &'static str) -> bool {
    let mut warned = WARNED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    warned.get_or_insert_with(HashSet::new).insert(op)
}

/// True when `op` has printed its `Warn`-mode warning in this process (for tests that
/// check it is printed once).
#[must_use]
pub fn has_warned(op: &str) -> bool {
    let warned = WARNED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    warned.as_ref().is_some_and(|w| w.contains(op))
}
