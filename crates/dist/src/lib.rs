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
pub mod rendezvous;
mod threads;

pub use ddp::{DdpConfig, DistributedDataParallel, LocalRows, ReduceMode};
pub use error::{DistError, Result};
pub use group::{even_counts, offsets, Backend, ProcessGroup, ReduceOp};
pub use launch_env::LaunchEnv;
#[cfg(feature = "mpi")]
pub use mpi::MpiGroup;
pub use threads::{ThreadGroup, DEFAULT_TIMEOUT};
