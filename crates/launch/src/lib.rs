//! # launch: how the processes of one job find each other
//!
//! ```text
//! launch       <- you are here: torchrun's environment, the rendezvous, the TCPStore
//!      ^
//! distributed  ProcessGroup (threads, MPI, NCCL), DDP, ... (re-exports this crate's API)
//!      ^
//! ditto        facade: re-exports; examples, tests, benches
//! ```
//!
//! Forming a job is one concept with its own rules, separate from what the job then
//! computes: read the launcher's variables ([`LaunchEnv`], checked before any socket
//! opens), agree on a job token ([`rendezvous::JobToken`]), meet in a store that speaks
//! PyTorch's `TCPStore` protocol ([`rendezvous::StoreClient`],
//! [`rendezvous::StoreServer`]) and hand rank 0's NCCL id to every rank, sealed
//! ([`rendezvous::Rendezvous`]). It is a crate of its own so that this code, the only
//! code in ditto's libraries that opens sockets or uses cryptography, is reviewed in
//! one place, its dependencies (HMAC, HKDF, XChaCha20-Poly1305) are named in one
//! manifest, and its tests build without ditto's tensors.
//!
//! The collective timeout lives here too: `DITTO_COLLECTIVE_TIMEOUT_S` is one of the
//! launch variables [`LaunchEnv`] checks at start-up, and a program that runs the
//! threads backend reads the same variable through [`collective_timeout_from_env`].
//!
//! Everything but the collective timeout is behind the `rendezvous` feature (on by
//! default; `distributed` turns it on with its `launch` feature): a program that trains
//! on one machine compiles none of the sockets and cryptography.
//!
//! What the rendezvous protects, and its wire format, are in docs/distributed.md §5-6.

#![warn(missing_docs)]

mod collective_timeout;
mod env_var;
mod error;
#[cfg(feature = "rendezvous")]
mod launch_env;
#[cfg(feature = "rendezvous")]
pub mod rendezvous;

pub use collective_timeout::{
    collective_timeout_from_env, collective_timeout_from_vars, COLLECTIVE_TIMEOUT_RANGE_S,
    COLLECTIVE_TIMEOUT_VAR, DEFAULT_TIMEOUT,
};
pub use error::{LaunchError, Result};
#[cfg(feature = "rendezvous")]
pub use launch_env::{LaunchEnv, MAX_RESTART_COUNT, MAX_WORLD_SIZE};
