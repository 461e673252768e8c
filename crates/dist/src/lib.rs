//! # dist: data parallel training whose loss curve does not depend on the number of ranks
//!
//! ```text
//! tensor-core  Device, DType, Shape, Storage, Tensor, errors
//!      ^
//! rng-gen      Philox engine, generators, samplers
//!      ^
//! nn-mini      layers, losses, SGD, data loader, checkpoints
//!      ^
//! dist         <- you are here: ProcessGroup (threads, MPI, NCCL), DDP,
//!      ^          DistributedSampler, world-size-invariant gradient sums
//! ditto        facade: re-exports; examples, tests, benches
//! ```

#![warn(missing_docs)]

pub mod ddp;
mod error;
mod group;
mod host;
mod launch_env;
#[cfg(feature = "mpi")]
mod mpi;
#[cfg(feature = "nccl")]
mod nccl;
pub mod rendezvous;
mod threads;
mod trainer;

pub use ddp::{DdpConfig, DistributedDataParallel, LocalRows, ReduceMode};
pub use error::{DistError, Result};
pub use group::{even_counts, offsets, Backend, ProcessGroup, ReduceOp};
pub use launch_env::LaunchEnv;
#[cfg(feature = "mpi")]
pub use mpi::MpiGroup;
#[cfg(feature = "nccl")]
pub use nccl::{is_nccl_available, nccl_version, unique_id, NcclGroup};
pub use threads::{ThreadGroup, DEFAULT_TIMEOUT};
pub use trainer::{DdpTrainer, MODE_KEY, WORLD_SIZE_KEY};

/// True when the NCCL library can be loaded. Always false in a build without the
/// `nccl` feature (like `torch.distributed.is_nccl_available()` in a build without
/// NCCL); never panics.
#[cfg(not(feature = "nccl"))]
#[must_use]
pub fn is_nccl_available() -> bool {
    false
}
