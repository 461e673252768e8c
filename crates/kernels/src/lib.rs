//! # kernels: ditto's random CUDA kernels and their launchers
//!
//! ```text
//! tensor-core  Device, DType, Shape, Storage, Tensor, ops, errors (on cuda-runtime)
//!      ^
//! kernels      <- you are here: the random CUDA sources + launchers
//!      ^
//! rng-gen      Philox engine, generators, the random-op pipeline, samplers
//!      ^
//! nn-mini      layers, losses, SGD, data loader, checkpoints
//! ```
//!
//! Launchers take `(seed, offset, n, ...)` as plain values: reserving the offset is the
//! generator's job, in rng-gen's random-op pipeline, which also owns the increment
//! functions (they describe the stream, which lives there).
//!
//! The CUDA side lives in `crates/kernels/cuda/`: headers with the per-element math as
//! `__host__ __device__` functions (`philox.cuh`, `ditto_math.cuh`), the per-block body
//! of every op (`random_blocks.cuh`, and `dropout.cuh` for dropout) and thin grid-stride
//! kernels (`random.cu`). All of them include tensor-core's host/device shim
//! (`crates/tensor-core/cuda/ditto_host_device.cuh`). They are compiled at run time by
//! NVRTC ([`nvrtc`], feature `cuda`; the compile options and the per-device module
//! cache are `cuda-runtime`'s, shared with tensor-core's kernels) and, for the tests, by
//! the host C++ compiler (the `host-parity` test crate, `tests/host-parity`), which
//! checks them against the Rust engine bit for bit without a GPU.
//!
//! A downstream crate's kernels can include the same headers: the build script of a crate
//! that depends on `kernels` reads their folders from `DEP_DITTO_KERNELS_INCLUDE`
//! (`ditto_build::ditto_include_dirs`), and [`source::translation_unit_with`] inlines
//! them for NVRTC. `docs/custom-random-op.md` walks through it.

#![warn(missing_docs)]

pub mod error;
/// Launch geometry, shared with tensor-core's kernels.
pub use tensor_core::grid;
pub mod mask;
pub mod source;

#[cfg(feature = "cuda")]
pub mod launch;
#[cfg(feature = "cuda")]
pub mod nvrtc;

pub use error::{KernelError, Result};
pub use grid::{Grid, Launch};
#[cfg(feature = "cuda")]
pub use launch::{Arg, KernelCall};
pub use mask::{mask_bit, pack_mask, packed_mask_words};
