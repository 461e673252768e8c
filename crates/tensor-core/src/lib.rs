//! # tensor-core: ditto's tensor
//!
//! ```text
//! cuda-runtime contexts, streams, allocator, graphs, NVRTC + module cache, cuBLAS
//!      ^
//! tensor-core  <- you are here: Device, DType, Shape, Storage, Tensor, ops, errors;
//!      ^          the tensor ops' CUDA kernels
//! kernels      the random kernels + launchers; the offset increments
//!      ^
//! rng-gen      Philox engine, generators, samplers
//!      ^
//! nn-mini      layers, losses, SGD, data loader, checkpoints
//! ```
//!
//! A [`Tensor`] is a typed, strided view over a reference-counted [`Storage`] that lives
//! on one [`Device`]. Nothing here knows about randomness: the crates above build random
//! tensors by filling a `Vec` (CPU) or a device buffer (CUDA) and wrapping it.
//!
//! The math training needs ([`ops`]) runs on both devices: on the CPU in Rust, on a GPU
//! as the kernels in `cuda/tensor_ops.cu` (compiled at run time by NVRTC, see
//! [`cuda::nvrtc`]) and cuBLAS for `matmul`. The kernels' per-element bodies live in
//! `cuda/tensor_ops.cuh`, which the tests also compile for the host (the `host-parity`
//! test crate, `tests/host-parity`) to check them against the CPU ops without a GPU.
//! NVRTC, the module cache and the rest of the CUDA runtime live in `cuda-runtime`,
//! below both this crate and `kernels`, which both compile and launch kernels.
//!
//! Every fallible operation returns [`TensorError`]; user input never panics.

#![warn(missing_docs)]

#[macro_use]
mod macros;

mod access;
pub mod audit;
mod autocast;
mod checked_index;
mod convert;
mod creation;
pub mod cuda_source;
pub mod determinism;
mod device;
mod dtype;
mod element;
mod error;
mod gather;
pub mod grid;
mod layout;
pub mod portable;
mod round;
mod shape;
mod simd_request;
mod storage;
mod tensor;
mod transfer;
mod view;

pub mod ops;

#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(not(feature = "cuda"))]
#[path = "cuda_disabled.rs"]
pub mod cuda;

/// The cudarc version ditto is built with, so other crates name the same types.
#[cfg(feature = "cuda")]
pub use cuda_runtime::cudarc;

pub use autocast::{
    autocast, autocast_disabled, autocast_operand, get_autocast_dtype, AutocastGuard,
};
pub use checked_index::CheckedIndex;
pub use creation::try_zeroed_vec;
pub use cuda_runtime::{CudaError, NvrtcError};
pub use determinism::{
    are_deterministic_algorithms_enabled, deterministic_mode,
    is_deterministic_algorithms_warn_only_enabled, use_deterministic_algorithms, Algorithm,
    DeterministicMode,
};
pub use device::Device;
pub use dtype::DType;
pub use element::Element;
pub use error::{Result, TensorError};
pub use portable::{are_portable_arithmetic_enabled, use_portable_arithmetic};
pub use shape::Shape;
pub use simd_request::{simd_request, SimdRequest};
pub use storage::{CpuStorage, Storage};
pub use tensor::Tensor;

/// Re-exported so users name the same `f16` / `bf16` types ditto stores.
pub use half::{bf16, f16};
