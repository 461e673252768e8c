//! The rendezvous's frames, and the caps that bound every length a peer sends: nothing
//! is allocated according to a length read from the socket before it is checked
//! against these caps (docs/distributed.md, "The rendezvous wire format").

use std::io::Read;

use super::token::{MAC_LEN, NONCE_LEN};

/// First bytes of a check-in.
pub(crate) const MAGIC: &[u8; 4] = b"DTRV";
/// Wire version 2: check-ins carry a nonce and are answered by a challenge (the job
/// token). Version 1 (no token) peers are refused with a message they can read.
pub(crate) const VERSION: u8 = 2;
/// Magic and version: read first, so a stranger or an older peer is told apart before
/// anything else is read.
pub(crate) const PREFIX_LEN: usize = 4 + 1;
/// The rest of a check-in: world u32, rank u32, the peer's nonce.
pub(crate) const HELLO_REST_LEN: usize = 4 + 4 + NONCE_LEN;
/// A challenge's body after its status byte: the master's nonce and its proof.
pub(crate) const CHALLENGE_LEN: usize = NONCE_LEN + MAC_LEN;

/// The largest payload the master sends (NCCL's id is 128 bytes).
pub const MAX_PAYLOAD: u32 = 1 << 16;
/// The longest refusal reason, in bytes.
pub const MAX_REASON: u32 = 4096;

/// Reply statuses.
pub(crate) const GO: u8 = 0;
pub(crate) const TIMED_OUT: u8 = 1;
pub(crate) const PEER_EXITED: u8 = 2;
pub(crate) const REFUSED: u8 = 3;
pub(crate) const CHALLENGE: u8 = 4;

/// What a peer claims in its check-in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hello {
    pub(crate) world: u32,
    pub(crate) rank: u32,
    pub(crate) nonce: [u8; NONCE_LEN],
}

impl Hello {
    pub(crate) fn to_bytes(self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(PREFIX_LEN + HELLO_REST_LEN);
        bytes.extend_from_slice(MAGIC);
        bytes.push(VERSION);
        bytes.extend_from_slice(&self.world.to_le_bytes());
        bytes.extend_from_slice(&self.rank.to_le_bytes());
        bytes.extend_from_slice(&self.nonce);
        bytes
    }

    /// The check-in after its prefix.
    pub(crate) fn from_rest(rest: &[u8; HELLO_REST_LEN]) -> Self {
        let word = |at: usize| u32::from_le_bytes(rest[at..at + 4].try_into().expect("4 bytes"));
        Hello {
            world: word(0),
            rank: word(4),
            nonce: rest[8..].try_into().expect("NONCE_LEN bytes"),
        }
    }
}

/// `GO` and the payload (whose size the caller checked against [`MAX_PAYLOAD`]).
pub(crate) fn go(payload: &[u8]) -> Vec<u8> {
    let mut reply = vec![GO];
    reply.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    reply.extend_from_slice(payload);
    reply
}

/// `REFUSED` and the reason, cut to [`MAX_REASON`] bytes at a character boundary.
pub(crate) fn refused(reason: &str) -> Vec<u8> {
    let mut end = reason.len().min(MAX_REASON as usize);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let mut reply = vec![REFUSED];
    reply.extend_from_slice(&(end as u32).to_le_bytes());
    reply.extend_from_slice(&reason.as_bytes()[..end]);
    reply
}

/// `TIMED_OUT` or `PEER_EXITED` and the ranks concerned.
pub(crate) fn ranks(status: u8, ranks: &[usize]) -> Vec<u8> {
    let mut reply = vec![status];
    reply.extend_from_slice(&(ranks.len() as u32).to_le_bytes());
    for &r in ranks {
        reply.extend_from_slice(&(r as u32).to_le_bytes());
    }
    reply
}

/// Reads a little-endian u32.
pub(crate) fn read_u32(stream: &mut impl Read) -> std::io::Result<u32> {
    let mut word = [0u8; 4];
    stream.read_exact(&mut word)?;
    Ok(u32::from_le_bytes(word))
}

/// Reads exactly `N` bytes.
pub(crate) fn read_array<const N: usize>(stream: &mut impl Read) -> std::io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    stream.read_exact(&mut bytes)?;
    Ok(bytes)
}
