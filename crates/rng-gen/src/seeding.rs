//! `manual_seed` and `seed`: the process-wide seeding calls that reach every device.
//!
//! They need the registry (the CPU generator) and the `cuda` module (every CUDA
//! device's generator), and the `cuda` module needs the registry; kept in the registry,
//! they would make the registry and `cuda` need each other.

use crate::generator::entropy_seed;
use crate::registry::current_cpu;

/// Seeds the CPU generator and every CUDA device's generator with `seed` (offset 0),
/// like `torch.manual_seed`: the one call that makes a program reproducible.
pub fn manual_seed(seed: u64) {
    current_cpu().manual_seed(seed);
    crate::cuda::manual_seed_all(seed);
}

/// Seeds the CPU generator and every CUDA generator from OS entropy (one seed for all,
/// like `torch.seed`) and returns it, so the run can be replayed from a log.
pub fn seed() -> u64 {
    let seed = entropy_seed();
    manual_seed(seed);
    seed
}
