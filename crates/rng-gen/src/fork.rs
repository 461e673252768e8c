//! `fork_rng`: run code that draws from the default generators without disturbing them,
//! and without disturbing other threads either.
//!
//! # Semantics, next to PyTorch's
//!
//! `torch.random.fork_rng(devices)` saves the states of the default generators, runs the
//! block, and sets the saved states back. The generators are process-wide, so while the
//! block runs every other thread draws from the same generators, and at the end the
//! restore rewinds them under those threads: numbers they drew are handed out again
//! (measured: 3,035,590 of 4,962,304 words another thread drew were repeats).
//!
//! ditto's [`fork_rng`] forks *for the calling thread only*. On entry, each listed
//! device's default generator is copied into a thread-local override; until the block
//! ends, everything on this thread that resolves "the default generator of that device"
//! resolves to the copy: random ops called without a generator, [`default_generator`],
//! [`manual_seed`](crate::manual_seed), [`get_rng_state`](crate::get_rng_state),
//! [`set_rng_state`](crate::set_rng_state), the `cuda::*` seeding functions, a data
//! loader that derives its key from the default generator. The block sees exactly
//! what PyTorch's block sees (the copy starts at the real generator's state), while the
//! real generators are never touched: other threads draw on undisturbed, and after the
//! block this thread continues from wherever they left the real stream.
//!
//! Consequences worth knowing:
//! - Work the block hands to *other* threads (spawned threads, a thread pool) draws
//!   from the real generators, as those threads are not forked. Ops themselves are safe:
//!   each reserves its stretch of the stream on the calling thread before any
//!   parallel work starts.
//! - A thread-pool thread that calls `fork_rng` inside a pool task and, while blocked
//!   inside the block (waiting on a `join`), runs other tasks of the pool (rayon's work
//!   stealing does this) lends its fork to those tasks. Fork outside pool tasks, or
//!   give such tasks explicit generators.
//! - A generator handle obtained before the block (`default_generator(Cpu)` stored in a
//!   variable) is the real generator; one obtained inside is the copy, and after the
//!   block it is a detached generator that nothing else uses.
//! - Forks nest: an inner fork copies the outer fork's copy; each block's end drops
//!   exactly its own copies, also when a panic unwinds through it.
//!
//! [`fork_rng_all_threads`] keeps PyTorch's process-wide save-and-rewind, for code that
//! needs the fork to cover threads the block starts, and whose other threads do not
//! draw from these generators meanwhile.

use tensor_core::Device;

use crate::registry::default_generator;
use crate::stream::key::Key;
use crate::thread_forks;
use crate::{Generator, RngError};

/// Runs `f` with the default generators of `devices` forked for the calling thread:
/// like `torch.random.fork_rng`, except that nothing is rewound under other threads.
///
/// Why: evaluation, logging or a sanity check that draws random numbers would otherwise
/// shift every later op of the training run, so the run would no longer match one
/// without the check. List `Device::Cpu` to fork the CPU generator (nothing is forked
/// implicitly). Duplicates are ignored.
///
/// PyTorch saves the process-wide generators' states and sets them back at the end,
/// which rewinds them under every other thread (numbers those threads drew during the
/// block are handed out again). Here, on entry, each listed generator is copied into a
/// thread-local override: inside `f`, everything *on this thread* that resolves that
/// device's default generator (ops without a generator, [`default_generator`],
/// [`manual_seed`](crate::manual_seed), [`get_rng_state`](crate::get_rng_state) /
/// [`set_rng_state`](crate::set_rng_state), `cuda::*`) acts on the copy, which starts
/// at the real state, so `f` sees what PyTorch's block would see. The real generators
/// are never touched: other threads draw on undisturbed. Forks nest (an inner fork
/// copies the outer copy). Work `f` hands to other threads is not forked; a pool thread
/// blocked inside a fork while running stolen tasks lends them its fork.
/// [`fork_rng_all_threads`] keeps PyTorch's process-wide behaviour.
///
/// The copies are dropped when `f` returns (also an `Err` inside `R`) or panics (the
/// panic continues unchanged; nothing is caught). Errors with `NoSuchDevice`, before
/// running `f`, if a listed CUDA device does not exist.
pub fn fork_rng<R>(devices: &[Device], f: impl FnOnce() -> R) -> Result<R, RngError> {
    let mut copies = Vec::new();
    for device in Device::distinct(devices) {
        let current = default_generator(device)?;
        copies.push((device, Generator::from_key(device, current.key())));
    }
    let _pop = thread_forks::push(copies);
    Ok(f())
}

/// Puts saved keys back when dropped: after a normal return, an `Err`, or a panic
/// unwinding through [`fork_rng_all_threads`].
struct Restore {
    saved: Vec<(Generator, Key)>,
}

impl Drop for Restore {
    fn drop(&mut self) {
        for (generator, key) in &self.saved {
            generator.set_key(*key);
        }
    }
}

/// PyTorch's `torch.random.fork_rng` exactly: saves the states of the default
/// generators of `devices`, runs `f`, and sets the saved states back, for every thread
/// of the process.
///
/// The rewind happens under every thread: numbers another thread drew from these
/// generators while `f` ran are handed out again afterwards. Use it only when no other
/// thread draws from them meanwhile and `f` itself hands random work to other threads
/// (which [`fork_rng`] does not cover); otherwise use [`fork_rng`]. Restores on return,
/// `Err` and panic alike; errors with `NoSuchDevice`, before running `f`, for a CUDA
/// device that does not exist. Called inside a [`fork_rng`] block, it saves and
/// restores that block's copies.
pub fn fork_rng_all_threads<R>(devices: &[Device], f: impl FnOnce() -> R) -> Result<R, RngError> {
    let mut saved: Vec<(Generator, Key)> = Vec::with_capacity(devices.len());
    for device in Device::distinct(devices) {
        let generator = default_generator(device)?;
        let key = generator.key();
        saved.push((generator, key));
    }
    let _restore = Restore { saved };
    Ok(f())
}
