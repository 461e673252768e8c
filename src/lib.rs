//! # ditto: reproducible randomness for tensors, on CPUs and CUDA GPUs
//!
//! The facade crate: it re-exports the six crates of the workspace so a user depends on
//! one crate. See `README.md` and `docs/contract.md` for the random-stream contract.

#![warn(missing_docs)]

pub use distributed;
pub use kernels;
pub use launch;
pub use nn_mini;
pub use rng_gen;
pub use tensor_core;

/// The names most programs need, and the traits whose methods they call (a layer's
/// `forward` / `parameters`, a trainer's `losses` / `step_count`).
pub mod prelude {
    pub use nn_mini::train::TrainingRun;
    pub use nn_mini::Module;
    pub use tensor_core::{bf16, f16, DType, Device, Tensor, TensorError};
}

/// Every op in ditto with a nondeterministic fast path: tensor-core's ops and the data
/// loader's `in_order(false)`, in the order of the table in `docs/determinism.md`.
#[must_use]
pub fn nondeterministic_ops() -> Vec<&'static tensor_core::determinism::FastPath> {
    let mut ops: Vec<&'static tensor_core::determinism::FastPath> =
        tensor_core::determinism::paths::TENSOR_OPS.to_vec();
    ops.push(&nn_mini::data::IN_ORDER_FALSE);
    ops
}

/// The markdown table of [`nondeterministic_ops`]: what each op's fast and
/// deterministic paths do and what each mode of the deterministic-algorithms switch does
/// with it. `docs/determinism.md` holds this table verbatim (a test checks it).
#[must_use]
pub fn determinism_table() -> String {
    tensor_core::determinism::markdown_table(&nondeterministic_ops())
}
