//! # host-parity: ditto's CUDA code, compiled for the host, for the tests
//!
//! Every kernel body ditto runs on a GPU is a `__host__ __device__` function in a `.cuh`
//! header. `build.rs` compiles those headers with the host C++ compiler (with the flags
//! that make host floats round as NVRTC's `--fmad=false` build does), and this crate
//! wraps them as safe Rust functions, so tests on a machine without a GPU can hold the
//! GPU's code against the Rust code bit for bit (docs/contract.md §11):
//!
//! - [`tensor_ops`]: the tensor-op kernels (`tensor_ops.cuh`, `transformer_ops.cuh`) as
//!   functions on CPU tensors, against tensor-core's CPU ops;
//! - [`random`]: the random blocks (`philox.cuh`, `ditto_math.cuh`,
//!   `random_blocks.cuh`, `dropout.cuh`), against rng-gen's engine.
//!
//! Only tests depend on it (a dev-dependency), so the product crates carry no host build
//! and need no C++ compiler.

pub mod random;
pub mod tensor_ops;
