//! # nn-mini: ditto's small training stack
//!
//! ```text
//! tensor-core  Device, DType, Shape, Storage, Tensor, errors
//!      ^
//! kernels      CUDA sources + launchers; the offset increments
//!      ^
//! rng-gen      Philox engine, generators, samplers, random tensor ops
//!      ^
//! nn-mini      <- you are here: layers, losses, SGD, data loader, checkpoints,
//!      ^          training loop
//! ditto        facade: re-exports; examples, tests, benches
//! ```
//!
//! Just enough of `torch.nn` / `torch.optim` / `torch.utils.data` to train an MLP, built
//! to show ditto's promise end to end: **the same seed gives the same loss curve, bit for
//! bit, whether the run goes straight through or is killed, checkpointed and resumed,
//! and whatever the number of loader workers.**
//!
//! * [`Module`] layers with hand-written backward passes: [`Linear`] (PyTorch's default
//!   init, drawn from a [`rng_gen::Generator`]), [`ReLU`], [`Dropout`] (the Philox
//!   dropout op; backward reuses the forward's reservation and packed mask),
//!   [`Sequential`].
//! * Losses returning `(loss, grad)`: [`cross_entropy`], [`mse_loss`].
//! * [`Sgd`] with PyTorch's exact momentum / dampening / weight-decay / Nesterov rule.
//! * [`data`]: a [`DataLoader`] whose batches and per-sample randomness derive from
//!   `(seed, epoch, index)` with `fold_in`, loaded by worker threads, delivered in
//!   order, resumable mid-epoch.
//! * [`checkpoint`]: one safetensors file with everything above plus every generator
//!   state, written atomically, with a checksum and typed errors.
//! * [`train`]: the training loop of `examples/train_resume.rs`, as a library so tests
//!   can resume it at every step.

#![warn(missing_docs)]

mod error;
mod global_rows;
mod grad_row_groups;
mod module;

pub mod checkpoint;
pub mod data;
pub mod gpt;
mod layers;
mod loss;
pub mod optim;
pub mod train;

pub use checkpoint::{Checkpoint, CheckpointError};
pub use data::{Batch, DataLoader, Dataset, LoaderState, Sample, SampleRng};
pub use error::{NnError, Result};
pub use global_rows::GlobalRows;
pub use grad_row_groups::GradRowGroups;
pub use layers::{Dropout, Embedding, Gelu, LayerNorm, Linear, ReLU, Sequential};
pub use loss::{cross_entropy, cross_entropy_with, mse_loss, ClassTargets};
pub use module::{visit_leaf, visit_leaf_mut, Module, Parameter};
pub use optim::{
    clip_grad_norm_, AdamW, AdamWConfig, AdamWState, Optimizer, Sgd, SgdConfig, WarmupCosine,
};
