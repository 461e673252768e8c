//! How NCCL's 128-byte id reaches every rank: through a key-value store that speaks
//! PyTorch's `TCPStore` protocol. Bootstrap (and, later, each rank's progress), never
//! tensor data.
//!
//! - **Under torchrun** (`TORCHELASTIC_USE_AGENT_STORE=True`) the agent already hosts
//!   the job's `TCPStore` on `MASTER_ADDR:MASTER_PORT`: every rank joins it as a client
//!   ([`StoreClient`]) and no ditto process binds a port. Keys live under
//!   `worker/attempt_N/ditto/` (`N` = `TORCHELASTIC_RESTART_COUNT`).
//! - **Otherwise** rank 0 hosts ditto's own store ([`StoreServer`]) there: the same
//!   protocol behind the job token's handshake ([`gate`]), so only ranks that prove the
//!   token get a session, and strangers can neither stall the job nor learn anything
//!   about it. One client serves both stores.
//!
//! On either store the ranks run the same exchange ([`exchange`]): each peer writes a
//! check-in MAC'd with the job token ([`JobToken`]), rank 0 checks them all and writes
//! each peer a verdict sealed with the token (XChaCha20-Poly1305) and bound to that
//! peer's check-in: the id, or why the job cannot form. Everything is bounded by one
//! timeout:
//!
//! - a rank that never checks in: rank 0 tells every waiting peer which ranks are
//!   missing, and every rank returns [`LaunchError::Timeout`](crate::LaunchError::Timeout)
//!   naming them;
//! - a rank that checks in and exits (ditto's store sees its connection close): every
//!   rank returns [`LaunchError::PeerExited`](crate::LaunchError::PeerExited) naming it;
//! - a rank 0 that never comes up or goes away: the peers return `Timeout` /
//!   `PeerExited` naming rank 0.
//!
//! What this protects, with and without `DITTO_RENDEZVOUS_SECRET`, and the wire format
//! (version [`WIRE_VERSION`]) are in docs/distributed.md §5-6.

pub mod exchange;
pub mod gate;
mod horovod_store;
mod join;
mod records;
mod seal;
mod store;
pub mod tcpstore;
pub(crate) mod timed_io;
mod token;

pub use exchange::{NoWatch, Watch, VERDICT_GRACE};
pub use gate::{MAX_REASON, REFUSED_UNPROVEN, WIRE_VERSION};
pub use horovod_store::HorovodStore;
pub use join::{check_restart_count, Rendezvous, RESTART_COUNT_KEY};
pub use records::{check_in_record, Keys, MAX_PAYLOAD};
pub use store::Store;
pub use tcpstore::{Handshake, LocalStore, RunningStore, StoreClient, StoreServer};
pub use token::{
    estimated_secret_bits, nonce, Claim, JobToken, Side, MAC_LEN, MAX_JOB_ID_LEN, MAX_SECRET_LEN,
    MIN_SECRET_BITS, NONCE_LEN,
};

/// A connection ditto's store turned away while the job formed, and why (what the peer
/// was told, when it spoke the protocol).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Where it came from.
    pub from: std::net::SocketAddr,
    /// Why it was refused.
    pub reason: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused {}: {}", self.from, self.reason)
    }
}
