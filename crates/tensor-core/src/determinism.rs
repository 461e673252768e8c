//! The process-wide deterministic-algorithms switch (DESIGN.md §4), PyTorch's
//! `torch.use_deterministic_algorithms` in Rust form.
//!
//! Random ops in ditto are deterministic by construction. What is not: an op whose
//! *fast* path lets timing decide the result, such as GPU atomics accumulating floats in
//! arrival order, a reduction split by however many threads happen to run, or a data
//! loader delivering batches in the order workers finish. Each such op calls
//! [`check_nondeterministic`] before taking its fast path, and the switch decides:
//!
//! | mode    | the op                                                           |
//! |---------|------------------------------------------------------------------|
//! | `Off`   | runs its fast path silently (the default, as in PyTorch)         |
//! | `Warn`  | runs its fast path and prints one warning per op naming the fix  |
//! | `Error` | fails with [`TensorError::Nondeterministic`] naming the op and the deterministic alternative |

use std::collections::HashSet;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use crate::TensorError;

/// What ops with a nondeterministic fast path do. See the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeterministicMode {
    /// Fast paths allowed, silently.
    #[default]
    Off,
    /// Fast paths allowed, with one warning per op (PyTorch's `warn_only=True`).
    Warn,
    /// Fast paths refused with an error.
    Error,
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
    match MODE.load(Ordering::SeqCst) {
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

/// Called by an op just before it takes a nondeterministic fast path. `op` names the
/// op as a user wrote it; `alternative` says how to get the deterministic path.
pub fn check_nondeterministic(
    op: &'static str,
    alternative: &'static str,
) -> Result<(), TensorError> {
    match deterministic_mode() {
        DeterministicMode::Off => Ok(()),
        DeterministicMode::Warn => {
            let mut warned = WARNED
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if warned.get_or_insert_with(HashSet::new).insert(op) {
                eprintln!(
                    "ditto warning: {op} does not have a deterministic implementation here, \
                     but use_deterministic_algorithms(Warn) is set; use {alternative}"
                );
            }
            Ok(())
        }
        DeterministicMode::Error => Err(TensorError::Nondeterministic { op, alternative }),
    }
}
