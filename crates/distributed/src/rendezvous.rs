//! A small TCP rendezvous store on the master: how NCCL's 128-byte id reaches every
//! rank (PyTorch's `TCPStore` plays this part under torchrun). Bootstrap only: it moves
//! one payload from rank 0 to the others, never tensor data.
//!
//! Rank 0 listens on `MASTER_ADDR:MASTER_PORT` (or `DITTO_RENDEZVOUS_BIND`); every other
//! rank connects (retrying while the master is not up yet), checks in with its rank and
//! proves that it belongs to this job ([`JobToken`]: a challenge-response HMAC-SHA256
//! over fresh nonces, so the key never crosses the wire and a recorded check-in cannot
//! be replayed). When all `world - 1` peers are in, the master sends each of them the
//! payload. Unlike `TCPStore`, the port need not be on a trusted network:
//!
//! - a connection that does not prove the token (another job, a stale process, a
//!   replay) is refused with a message and takes no slot; the real rank still gets in;
//! - a connection that is not a check-in at all (an HTTP request, a port scan) or says
//!   nothing is closed, after at most a few seconds, by a handshake thread of its own:
//!   it neither ends nor holds up the forming job;
//! - a second proven check-in for a rank already in is refused with a message naming
//!   both addresses; the first keeps its slot;
//! - every length read from the socket is checked against a cap
//!   ([`MAX_PAYLOAD`], [`MAX_REASON`], the world size) before anything is allocated.
//!
//! Everything is bounded by one timeout:
//!
//! - a rank that never checks in: the master answers every connected peer with the
//!   missing ranks and returns [`DistError::Timeout`](crate::DistError::Timeout) naming
//!   them; the peers return the same error;
//! - a rank that checks in and then exits (its connection closes): the master notices
//!   at once, and every rank returns
//!   [`DistError::PeerExited`](crate::DistError::PeerExited) naming it;
//! - a master that never comes up or goes away: the peers return `Timeout` /
//!   `PeerExited` naming rank 0.
//!
//! The wire format (version 2) is in docs/distributed.md, "The rendezvous wire format".

mod client;
mod server;
mod token;
mod wire;

use std::time::Duration;

pub use client::fetch;
pub use server::RendezvousServer;
pub use token::{Claim, JobToken, Side, MAC_LEN, MAX_JOB_ID_LEN, MAX_SECRET_LEN, NONCE_LEN};
pub use wire::{MAX_PAYLOAD, MAX_REASON};

/// How often the master looks for new peers and closed connections.
const POLL: Duration = Duration::from_millis(10);
/// How long peers wait beyond the timeout for the master's verdict (which names the
/// missing ranks), before concluding the master itself is gone.
const VERDICT_GRACE: Duration = Duration::from_secs(2);

/// A connection the master turned away while the job formed, and why (what the peer
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
