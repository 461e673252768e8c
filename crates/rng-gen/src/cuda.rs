//! `torch.cuda`'s seeding functions for the default generators of CUDA devices.
//!
//! As in PyTorch, seeding with no GPU present is a silent no-op (so one script runs on
//! any machine), while reading or setting the state of a device that does not exist is
//! an error. "The current device" is device 0: ditto has no per-thread current device.

use tensor_core::Device;

use crate::generator::entropy_seed;
use crate::registry::default_generator;
use crate::RngError;

/// Default generators of all existing CUDA devices, in ordinal order.
fn all_generators() -> Vec<crate::Generator> {
    (0..tensor_core::cuda::device_count())
        .filter_map(|i| default_generator(Device::Cuda(i)).ok())
        .collect()
}

/// Seeds the default generator of device 0 (`torch.cuda.manual_seed`); no-op without a
/// GPU.
pub fn manual_seed(seed: u64) {
    if let Ok(generator) = default_generator(Device::Cuda(0)) {
        generator.manual_seed(seed);
    }
}

/// Seeds the default generator of every CUDA device (`torch.cuda.manual_seed_all`);
/// no-op without a GPU.
pub fn manual_seed_all(seed: u64) {
    for generator in all_generators() {
        generator.manual_seed(seed);
    }
}

/// Seeds device 0's generator from OS entropy and returns the seed, or `None` (and does
/// nothing) without a GPU.
pub fn seed() -> Option<u64> {
    let generator = default_generator(Device::Cuda(0)).ok()?;
    Some(generator.seed())
}

/// Seeds every CUDA device's generator with one seed from OS entropy and returns it, or
/// `None` (and does nothing) without a GPU.
pub fn seed_all() -> Option<u64> {
    let generators = all_generators();
    if generators.is_empty() {
        return None;
    }
    let seed = entropy_seed();
    for generator in generators {
        generator.manual_seed(seed);
    }
    Some(seed)
}

/// The seed of device 0's default generator (`torch.cuda.initial_seed`); errors with
/// `NoSuchDevice` without a GPU.
pub fn initial_seed() -> Result<u64, RngError> {
    Ok(default_generator(Device::Cuda(0))?.initial_seed())
}

/// The state bytes of CUDA device `index`'s default generator.
pub fn get_rng_state(index: usize) -> Result<Vec<u8>, RngError> {
    Ok(default_generator(Device::Cuda(index))?.get_state())
}

/// Restores CUDA device `index`'s default generator (from any generator's state bytes).
pub fn set_rng_state(state: &[u8], index: usize) -> Result<(), RngError> {
    default_generator(Device::Cuda(index))?.set_state(state)
}

/// The states of all CUDA devices' default generators, in ordinal order (empty without
/// a GPU).
#[must_use]
pub fn get_rng_state_all() -> Vec<Vec<u8>> {
    all_generators()
        .iter()
        .map(crate::Generator::get_state)
        .collect()
}

/// Restores every CUDA device's default generator, one state per device in ordinal
/// order. All states are validated before any is set, so on error nothing changes.
pub fn set_rng_state_all(states: &[Vec<u8>]) -> Result<(), RngError> {
    let generators = all_generators();
    if states.len() != generators.len() {
        return Err(RngError::DeviceCountMismatch {
            expected: generators.len(),
            got: states.len(),
        });
    }
    // Validate everything first: a scratch generator refuses bad bytes unchanged.
    let scratch = crate::Generator::new(Device::Cpu);
    for state in states {
        scratch.set_state(state)?;
    }
    for (generator, state) in generators.iter().zip(states) {
        generator.set_state(state)?;
    }
    Ok(())
}
