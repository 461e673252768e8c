//! The default generator of each device, and the CPU generator's process-wide state
//! functions (`torch.initial_seed`, `torch.get_rng_state`, `torch.set_rng_state`).
//! Seeding every device at once (`manual_seed`, `seed`) is in `seeding.rs`, above both
//! this file and the CUDA functions it calls.
//!
//! Ops called without an explicit generator draw from their device's default
//! generator, so seeding once at the top of a program makes every such op reproducible.
//! Inside [`fork_rng`](crate::fork_rng), "the default generator" of a forked device is
//! the calling thread's copy: every function here resolves it through
//! [`default_generator`], so seeding and state calls inside a fork act on the copy.
//! The CPU generator always exists; the generator of CUDA device `i` is created on first
//! use, and only if device `i` exists.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use tensor_core::Device;

use crate::{Generator, RngError};

/// Errors with `NoSuchDevice` unless `device` is the CPU or an existing CUDA device.
pub(crate) fn check_device(device: Device) -> Result<(), RngError> {
    match device {
        Device::Cpu => Ok(()),
        Device::Cuda(index) => {
            let available = tensor_core::cuda::device_count();
            if index < available {
                Ok(())
            } else {
                Err(RngError::NoSuchDevice { device, available })
            }
        }
    }
}

fn cpu_generator() -> &'static Generator {
    static CPU: OnceLock<Generator> = OnceLock::new();
    CPU.get_or_init(|| Generator::new(Device::Cpu))
}

/// The CPU default generator as this thread sees it (the fork's copy inside a fork).
pub(crate) fn current_cpu() -> Generator {
    crate::thread_forks::forked(Device::Cpu).unwrap_or_else(|| cpu_generator().clone())
}

/// The default generator of `device` (a shared handle: seeding it affects every op on
/// `device` that is not given a generator). Inside a [`fork_rng`](crate::fork_rng) that
/// lists `device`, on the thread running it, this is the fork's copy instead. Errors
/// with `NoSuchDevice` for a CUDA device that does not exist, including every CUDA
/// device in a build without the `cuda` feature.
pub fn default_generator(device: Device) -> Result<Generator, RngError> {
    check_device(device)?;
    if let Some(copy) = crate::thread_forks::forked(device) {
        return Ok(copy);
    }
    static CUDA: OnceLock<Mutex<HashMap<usize, Generator>>> = OnceLock::new();
    match device {
        Device::Cpu => Ok(cpu_generator().clone()),
        Device::Cuda(index) => {
            let map = CUDA.get_or_init(|| Mutex::new(HashMap::new()));
            // One insert at a time: a poisoned map is still consistent.
            let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
            Ok(map
                .entry(index)
                .or_insert_with(|| Generator::new(device))
                .clone())
        }
    }
}

/// The seed of the CPU default generator (`torch.initial_seed`).
#[must_use]
pub fn initial_seed() -> u64 {
    current_cpu().initial_seed()
}

/// The CPU default generator's state bytes (`torch.get_rng_state`), for checkpoints.
#[must_use]
pub fn get_rng_state() -> Vec<u8> {
    current_cpu().get_state()
}

/// Restores the CPU default generator from [`get_rng_state`] bytes (or any generator's
/// state: states are device-free). On error the generator is unchanged.
pub fn set_rng_state(state: &[u8]) -> Result<(), RngError> {
    current_cpu().set_state(state)
}
