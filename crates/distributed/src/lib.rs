//! # distributed: data parallel training whose loss curve does not depend on the number of ranks
//!
//! ```text
//! tensor-core  Device, DType, Shape, Storage, Tensor, errors
//!      ^
//! rng-gen      Philox engine, generators, samplers
//!      ^
//! nn-mini      layers, losses, SGD, data loader, checkpoints
//!      ^
//!      |       launch       torchrun's variables, rendezvous, TCPStore (no tensors)
//!      |         ^
//! distributed  <- you are here: ProcessGroup (threads, MPI, NCCL, Gloo), DDP,
//!      ^          DistributedSampler, world-size-invariant gradient sums
//! ditto        facade: re-exports; examples, tests, benches
//! ```
//!
//! PyTorch's data parallel pieces, and where they are here:
//!
//! | PyTorch | ditto |
//! |---|---|
//! | `init_process_group("gloo")` in one process, for tests | [`ThreadGroup`] (ranks are threads) |
//! | `init_process_group("gloo")` under `torchrun` (or `horovodrun --gloo`) | `GlooGroup::from_env` (feature `gloo`) |
//! | `init_process_group("mpi")` under `mpirun` | `MpiGroup` (feature `mpi`) |
//! | `init_process_group("nccl")` under `torchrun` | `NcclGroup::from_env` (feature `nccl`), `rendezvous` for the id (feature `launch`) |
//! | `torch.distributed.is_nccl_available()` | [`is_nccl_available`] |
//! | `all_reduce`, `broadcast`, `all_gather`, `all_to_all_single`, `barrier` | [`ProcessGroup`] |
//! | a c10d `Backend` (`register_backend`) | an [`engine::Engine`]; every engine is a [`ProcessGroup`] |
//! | `DistributedDataParallel` | [`DistributedDataParallel`] ([`ddp`]) |
//! | `DistributedSampler` + `set_epoch` | [`nn_mini::data::DistributedSampler`], epoch from the loader |
//!
//! What differs is the promise: the loss curve does not depend on the number of ranks.
//! Random layers draw every row at its position in the global batch
//! ([`nn_mini::GlobalRows`]), and [`ReduceMode::Invariant`] sums fixed micro-shards in
//! one fixed tree ([`ddp::tree`]), so 1, 2 and 4 ranks give bit-identical parameters;
//! [`DdpTrainer`] is the demo's training loop built from these pieces, with checkpoints
//! that resume on another world size. Each backend's collectives are tested against a
//! serial reference; the MPI tests run under `mpirun` (`tests/scripts/mpi_tests.sh`).
//!
//! The data-parallel rules are part of the random-stream contract (docs/contract.md §9);
//! how each backend is built and run, and the measurements behind the two modes, are in
//! docs/distributed.md.
//!
//! Forming a job across processes (torchrun's variables, the rendezvous, its store, the
//! progress board that names a dead rank) needs the `launch` feature, on by default here
//! and implied by `nccl`. The facade `ditto` leaves it off unless asked, so a program that
//! trains on one machine does not compile the sockets and the cryptography; the threads
//! and MPI backends and the collective timeout need none of it.

#![warn(missing_docs)]

pub mod ddp;
pub mod engine;
mod error;
mod flag;
#[cfg(feature = "gloo")]
mod gloo;
mod group;
mod host;
#[cfg(feature = "mpi")]
mod mpi;
#[cfg(feature = "nccl")]
mod nccl;
#[cfg(feature = "launch")]
mod progress;
mod threads;
mod trainer;

// Job formation lives in the `launch` crate; its API is re-exported where it always was,
// so callers name `distributed::rendezvous`, `distributed::LaunchEnv`, ... unchanged.
pub use ddp::{DdpConfig, DistributedDataParallel, LocalRows, ReduceMode};
pub use error::{DistError, Result, Straggler};
pub use flag::broadcast_flag;
#[cfg(feature = "gloo")]
pub use gloo::GlooGroup;
pub use group::{even_counts, offsets, Backend, ProcessGroup, ReduceOp};
#[cfg(feature = "launch")]
pub use launch::rendezvous;
pub use launch::{
    collective_timeout_from_env, collective_timeout_from_vars, LaunchError,
    COLLECTIVE_TIMEOUT_RANGE_S, COLLECTIVE_TIMEOUT_VAR, DEFAULT_TIMEOUT,
};
#[cfg(feature = "launch")]
pub use launch::{LaunchEnv, MAX_RESTART_COUNT, MAX_WORLD_SIZE};
#[cfg(feature = "mpi")]
pub use mpi::MpiGroup;
#[cfg(feature = "nccl")]
pub use nccl::{is_nccl_available, nccl_version, unique_id, NcclGroup};
#[cfg(feature = "launch")]
pub use progress::{ProgressBoard, HEARTBEAT};
pub use threads::ThreadGroup;
pub use trainer::{
    DdpLoop, DdpPlace, DdpTrainer, GptDdpTrainer, MAX_CHECKPOINT_BYTES, MODE_KEY, WORLD_SIZE_KEY,
};

/// True when the NCCL library can be loaded. Always false in a build without the
/// `nccl` feature (like `torch.distributed.is_nccl_available()` in a build without
/// NCCL); never panics.
#[cfg(not(feature = "nccl"))]
#[must_use]
pub fn is_nccl_available() -> bool {
    false
}
