//! The integration tests of this crate, built as one test binary (one link of the
//! workspace instead of one per file); each file of `integration/` is a module.
//! Tests that change process-wide state (default generators, deterministic mode,
//! portable arithmetic, the audit sink, environment variables) re-run themselves in
//! a process of their own through `test_support::own_process!`.

#[path = "integration/common/mod.rs"]
mod common;
#[path = "integration/cuda_header_parity.rs"]
mod cuda_header_parity;
#[path = "integration/default_generators.rs"]
mod default_generators;
#[path = "integration/default_seed.rs"]
mod default_seed;
#[path = "integration/errors.rs"]
mod errors;
#[path = "integration/f32math_exhaustive.rs"]
mod f32math_exhaustive;
#[path = "integration/fork_threads.rs"]
mod fork_threads;
#[path = "integration/independent_reference.rs"]
mod independent_reference;
#[path = "integration/inplace.rs"]
mod inplace;
#[path = "integration/offsets.rs"]
mod offsets;
#[path = "integration/reference_vectors.rs"]
mod reference_vectors;
#[path = "integration/state_bytes.rs"]
mod state_bytes;
#[path = "integration/statistics.rs"]
mod statistics;
#[path = "integration/thread_invariance.rs"]
mod thread_invariance;
