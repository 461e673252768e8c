//! # ditto: reproducible randomness for tensors, on CPUs and CUDA GPUs
//!
//! The facade crate: it re-exports the five crates of the workspace so a user depends on
//! one crate. See `README.md` and `DESIGN.md` for the random-stream contract.

#![warn(missing_docs)]

pub use dist;
pub use kernels;
pub use nn_mini;
pub use rng_gen;
pub use tensor_core;

/// The names most programs need.
pub mod prelude {
    pub use tensor_core::{bf16, f16, DType, Device, Tensor, TensorError};
}
