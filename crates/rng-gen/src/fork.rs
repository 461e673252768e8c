//! `fork_rng`: run code that draws from the default generators without disturbing them.

use tensor_core::Device;

use crate::registry::default_generator;
use crate::stream::key::Key;
use crate::{Generator, RngError};

/// Puts saved keys back when dropped: after a normal return, an `Err`, or a panic
/// unwinding through [`fork_rng`].
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

/// Runs `f` and then restores the default generators of `devices` to the states they
/// had before, like `torch.random.fork_rng`.
///
/// Why: evaluation, logging or a sanity check that draws random numbers would otherwise
/// shift every later op of the training run, so the run would no longer match one
/// without the check. List `Device::Cpu` to fork the CPU generator (nothing is forked
/// implicitly). Duplicates are ignored.
///
/// States are restored whatever `f` does: returns (also an `Err` inside `R`), or panics,
/// in which case the panic continues unchanged after the restore (a drop guard runs
/// during unwinding; nothing is caught). Errors with `NoSuchDevice`, before running
/// `f`, if a listed CUDA device does not exist.
pub fn fork_rng<R>(devices: &[Device], f: impl FnOnce() -> R) -> Result<R, RngError> {
    let mut saved: Vec<(Generator, Key)> = Vec::with_capacity(devices.len());
    let mut seen: Vec<Device> = Vec::with_capacity(devices.len());
    for &device in devices {
        if seen.contains(&device) {
            continue;
        }
        seen.push(device);
        let generator = default_generator(device)?;
        let key = generator.key();
        saved.push((generator, key));
    }
    let _restore = Restore { saved };
    Ok(f())
}
