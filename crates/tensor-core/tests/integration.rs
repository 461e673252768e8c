//! The integration tests of this crate, built as one test binary (one link of the
//! workspace instead of one per file); each file of `integration/` is a module.
//! Tests that change process-wide state (default generators, deterministic mode,
//! portable arithmetic, the audit sink, environment variables) re-run themselves in
//! a process of their own through `test_support::own_process!`.

#[path = "integration/audit.rs"]
mod audit;
#[path = "integration/cuda.rs"]
mod cuda;
#[path = "integration/determinism.rs"]
mod determinism;
#[path = "integration/determinism_modes.rs"]
mod determinism_modes;
#[path = "integration/determinism_switch.rs"]
mod determinism_switch;
#[path = "integration/fused_sgd.rs"]
mod fused_sgd;
#[path = "integration/index_add.rs"]
mod index_add;
#[path = "integration/matmul_threads.rs"]
mod matmul_threads;
#[path = "integration/nvrtc_tensor_ops.rs"]
mod nvrtc_tensor_ops;
#[path = "integration/portable_switch.rs"]
mod portable_switch;
#[path = "integration/simd_request.rs"]
mod simd_request;
#[path = "integration/support/mod.rs"]
mod support;
