//! # kernels: ditto's CUDA sources, their launchers, and the offset increments
//!
//! ```text
//! tensor-core  Device, DType, Shape, Storage, Tensor, errors
//!      ^
//! kernels      <- you are here: CUDA sources + launchers; the offset increments
//!      ^
//! rng-gen      Philox engine, generators, samplers
//!      ^
//! nn-mini      layers, losses, SGD, data loader, checkpoints
//! ```
//!
//! Launchers take `(seed, offset, n, ...)` as plain values: reserving the offset is the
//! generator's job (rng-gen), which uses [`increment_for`] from here so the CPU samplers
//! and the GPU kernels advance generators identically.
//!
//! The CUDA side lives in `kernels/cuda/`: headers with the per-element math as
//! `__host__ __device__` functions (`philox.cuh`, `ditto_math.cuh`), the per-block body
//! of every op (`random_blocks.cuh`) and thin grid-stride kernels (`random.cu`). They are
//! compiled at run time by NVRTC ([`nvrtc`], feature `cuda`; the compile options and the
//! per-device module cache are tensor-core's, shared with its own kernels) and, with the
//! `host-parity` feature, by the host C++ compiler so tests can check them against the
//! Rust engine bit for bit without a GPU ([`host_parity`]).

pub mod error;
/// Launch geometry, shared with tensor-core's kernels.
pub use tensor_core::grid;
pub mod increment;
pub mod mask;
pub mod source;

#[cfg(feature = "cuda")]
pub mod launch;
#[cfg(feature = "cuda")]
mod module_cache;
#[cfg(feature = "cuda")]
pub mod nvrtc;

#[cfg(feature = "host-parity")]
pub mod host_parity;

pub use error::{KernelError, Result};
pub use grid::{Grid, Launch};
pub use increment::{increment_for, words_for, words_per_element, RandomOp};
pub use mask::{mask_bit, pack_mask, packed_mask_words};
