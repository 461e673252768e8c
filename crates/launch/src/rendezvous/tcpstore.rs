//! PyTorch's `TCPStore`, spoken by ditto: the wire protocol ([`wire`]), a client
//! ([`StoreClient`]) of torchrun's agent store or of ditto's own, and ditto's own server
//! ([`StoreServer`]), which serves the same queries after the job token's handshake.

mod client;
mod hub;
mod kv;
mod server;
mod session;
pub mod wire;

pub use client::{Handshake, StoreClient};
pub use hub::LocalStore;
pub use kv::MAX_STORE_BYTES;
pub use server::{
    RunningStore, StoreServer, HANDSHAKE_DEADLINE, MAX_HANDSHAKES, MAX_HANDSHAKES_PER_SOURCE,
};
