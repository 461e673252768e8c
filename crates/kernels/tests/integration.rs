//! The integration tests of this crate, built as one test binary (one link of the
//! workspace instead of one per file); each file of `integration/` is a module.
//! Tests that change process-wide state (default generators, deterministic mode,
//! portable arithmetic, the audit sink, environment variables) re-run themselves in
//! a process of their own through `test_support::own_process!`.

#[path = "integration/nvrtc_compile.rs"]
mod nvrtc_compile;
