//! The calling thread's stack of forked default generators, which [`fork_rng`] pushes
//! and the registry consults.
//!
//! It sits below both: the registry must ask "is this device forked on this thread?"
//! before handing out a default generator, and `fork_rng` needs the registry to copy the
//! generator it forks. Keeping the stack in its own file lets each depend on it without
//! depending on each other.
//!
//! [`fork_rng`]: crate::fork_rng

use std::cell::RefCell;

use tensor_core::Device;

use crate::Generator;

thread_local! {
    /// This thread's forked default generators, innermost fork last.
    static FORKED: RefCell<Vec<(Device, Generator)>> = const { RefCell::new(Vec::new()) };
}

/// The calling thread's innermost forked copy of `device`'s default generator, if a
/// [`fork_rng`](crate::fork_rng) listing `device` is running on this thread.
pub(crate) fn forked(device: Device) -> Option<Generator> {
    FORKED.with(|forks| {
        forks
            .borrow()
            .iter()
            .rev()
            .find(|(d, _)| *d == device)
            .map(|(_, g)| g.clone())
    })
}

/// Pushes one fork's copies; they stay until the returned guard is dropped.
pub(crate) fn push(copies: Vec<(Device, Generator)>) -> PopForks {
    let depth = FORKED.with(|forks| {
        let mut forks = forks.borrow_mut();
        let depth = forks.len();
        forks.extend(copies);
        depth
    });
    PopForks { depth }
}

/// Drops the copies pushed by one [`fork_rng`](crate::fork_rng) when it ends (return
/// or unwind).
pub(crate) struct PopForks {
    depth: usize,
}

impl Drop for PopForks {
    fn drop(&mut self) {
        FORKED.with(|forks| forks.borrow_mut().truncate(self.depth));
    }
}
