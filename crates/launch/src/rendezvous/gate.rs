//! The handshake in front of ditto's own store (wire version 3): a connection becomes a
//! store session only after the peer has proven the job token, and the peer trusts the
//! store only after the store has proven it back.
//!
//! ```text
//! peer   -> store  check-in: "DTRV", version 3, world u32, rank u32, peer nonce   (45 bytes)
//! store  -> peer   challenge: 4, store nonce                                      (33 bytes)
//! peer   -> store  proof: HMAC(mac key, "ditto gate peer  " ‖ both nonces ‖ world ‖ rank)
//! store  -> peer   accepted: 5, HMAC(mac key, "ditto gate master" ‖ ...)          (33 bytes)
//!            or    refused: 3, length u32, UTF-8 reason
//! ```
//!
//! The peer proves first, so a connection that does not hold the key learns nothing
//! about the job (not even whether a secret is set): its refusal is a fixed sentence,
//! and no MAC of the store's reaches it to test guesses against. Before the store's
//! proof, the peer accepts nothing but a challenge or a refusal: a process that bound the
//! port first and answers anything else is an error naming the rendezvous, never a
//! store the peer uses.

use std::io::ErrorKind;
use std::net::TcpStream;
use std::time::Instant;

use super::timed_io::{is_closed, read_array_by, read_exact_by, write_all_by};
use super::token::{nonce, Claim, JobToken, Side, MAC_LEN, NONCE_LEN};
use crate::{LaunchError, Result};

/// First bytes of a check-in.
pub(crate) const MAGIC: &[u8; 4] = b"DTRV";
/// Wire version 3: the peer proves first, the store's reply carries its proof, and the
/// connection then speaks PyTorch's TCPStore protocol. Versions 1 and 2 are refused with
/// a message they can read.
pub const WIRE_VERSION: u8 = 3;
/// A check-in: magic, version, world u32, rank u32, the peer's nonce.
pub(crate) const HELLO_LEN: usize = 4 + 1 + 4 + 4 + NONCE_LEN;
/// The longest refusal reason, in bytes.
pub const MAX_REASON: u32 = 4096;

/// Status bytes (0 to 2 were version 2's verdicts, which now travel sealed in the store).
pub(crate) const REFUSED: u8 = 3;
pub(crate) const CHALLENGE: u8 = 4;
pub(crate) const ACCEPTED: u8 = 5;

/// What every connection that does not prove the token is told, word for word: what a
/// rank of this job launched wrong needs to fix itself, and nothing about the job.
pub const REFUSED_UNPROVEN: &str = "refused: this check-in did not prove the job token; \
    every rank of a job needs the same job id (DITTO_JOB_ID, else TORCHELASTIC_RUN_ID) \
    and the same DITTO_RENDEZVOUS_SECRET setting";

/// What a peer claims in its check-in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hello {
    pub(crate) world: u32,
    pub(crate) rank: u32,
    pub(crate) nonce: [u8; NONCE_LEN],
}

impl Hello {
    pub(crate) fn to_bytes(self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(HELLO_LEN);
        bytes.extend_from_slice(MAGIC);
        bytes.push(WIRE_VERSION);
        bytes.extend_from_slice(&self.world.to_le_bytes());
        bytes.extend_from_slice(&self.rank.to_le_bytes());
        bytes.extend_from_slice(&self.nonce);
        bytes
    }
}

/// A `REFUSED` frame with `reason` cut to [`MAX_REASON`] bytes at a character boundary.
pub(crate) fn refused(reason: &str) -> Vec<u8> {
    let mut end = reason.len().min(MAX_REASON as usize);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let mut frame = vec![REFUSED];
    frame.extend_from_slice(&(end as u32).to_le_bytes());
    frame.extend_from_slice(&reason.as_bytes()[..end]);
    frame
}

/// How a peer's handshake ended, when it did not fail.
#[derive(Debug)]
pub(crate) enum Passage {
    /// Both sides proved the token; the connection is now a store session.
    Admitted,
    /// The store closed the connection before accepting this rank (it was busy, or
    /// not up yet, or evicted a slow handshake): connect again.
    Retry,
}

/// The peer's side: checks in as `rank` of `world` on `stream`, proves `token` and checks
/// the store's proof, before `deadline`. `shown` names the store in errors.
pub(crate) fn pass(
    stream: &mut TcpStream,
    token: &JobToken,
    world: u32,
    rank: u32,
    deadline: Instant,
    shown: &str,
) -> Result<Passage> {
    let hello = Hello {
        world,
        rank,
        nonce: nonce()?,
    };
    let failed = |message: String| LaunchError::Rendezvous {
        address: shown.to_string(),
        message,
    };
    let timed_out = || LaunchError::Timeout {
        op: format!("rendezvous: the store at {shown} did not answer the check-in"),
        timeout: deadline.saturating_duration_since(Instant::now()),
        missing: vec![0],
    };
    if write_all_by(stream, &hello.to_bytes(), deadline).is_err() {
        return Ok(Passage::Retry);
    }
    let status = match read_array_by::<1>(stream, deadline) {
        Ok([status]) => status,
        Err(e) if is_closed(&e) => return Ok(Passage::Retry),
        Err(e) if e.kind() == ErrorKind::TimedOut => return Err(timed_out()),
        Err(e) => return Err(io(shown, e)),
    };
    match status {
        CHALLENGE => {}
        REFUSED => return Err(failed(read_reason(stream, deadline, shown)?)),
        other => {
            return Err(failed(format!(
                "the process on this port answered status {other} before proving the job \
                 token; a ditto store (wire version {WIRE_VERSION}) challenges first. Another \
                 program, another job or an older ditto holds MASTER_PORT: nothing it sent \
                 was used"
            )))
        }
    }
    // Until the store accepts this rank, a closed connection only means "try again".
    let master_nonce: [u8; NONCE_LEN] = match read_array_by(stream, deadline) {
        Ok(nonce) => nonce,
        Err(e) if is_closed(&e) => return Ok(Passage::Retry),
        Err(e) => return Err(io(shown, e)),
    };
    let claim = |side| Claim {
        side,
        peer_nonce: &hello.nonce,
        master_nonce: &master_nonce,
        world,
        rank,
    };
    match write_all_by(stream, &token.prove(&claim(Side::Peer)), deadline) {
        Ok(()) => {}
        Err(e) if is_closed(&e) => return Ok(Passage::Retry),
        Err(e) => return Err(io(shown, e)),
    }
    let answer = match read_array_by::<1>(stream, deadline) {
        Ok(answer) => answer,
        Err(e) if is_closed(&e) => return Ok(Passage::Retry),
        Err(e) => return Err(io(shown, e)),
    };
    match answer {
        [ACCEPTED] => {}
        [REFUSED] => return Err(failed(read_reason(stream, deadline, shown)?)),
        [other] => {
            return Err(failed(format!(
                "the store answered status {other} to this rank's proof; expected \
                 {ACCEPTED} (accepted) or {REFUSED} (refused)"
            )))
        }
    }
    let proof: [u8; MAC_LEN] = read_array_by(stream, deadline).map_err(|e| io(shown, e))?;
    if !token.verify(&claim(Side::Master), &proof) {
        return Err(failed(
            "the store did not prove the job token: another job's store holds MASTER_PORT, \
             or DITTO_JOB_ID / DITTO_RENDEZVOUS_SECRET differ between ranks; nothing it \
             sent was used"
                .into(),
        ));
    }
    Ok(Passage::Admitted)
}

/// A refusal's reason (the length checked against [`MAX_REASON`] before anything is
/// allocated), shown as the store's words: before the store proved itself, anyone may
/// have written them.
fn read_reason(stream: &mut TcpStream, deadline: Instant, shown: &str) -> Result<String> {
    let len = u32::from_le_bytes(read_array_by(stream, deadline).map_err(|e| io(shown, e))?);
    if len > MAX_REASON {
        return Err(LaunchError::Rendezvous {
            address: shown.to_string(),
            message: format!(
                "the store announced a refusal of {len} bytes, more than {MAX_REASON}"
            ),
        });
    }
    let mut reason = vec![0u8; len as usize];
    read_exact_by(stream, &mut reason, deadline).map_err(|e| io(shown, e))?;
    let reason: String = String::from_utf8_lossy(&reason)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    Ok(format!("the store refused this rank (its words): {reason}"))
}

fn io(shown: &str, source: std::io::Error) -> LaunchError {
    LaunchError::Io {
        context: format!("rendezvous handshake with the store at {shown}"),
        source,
    }
}

/// How the store's side of a handshake ended.
pub(crate) enum Admission {
    /// The peer proved the token; the store has not answered yet ([`accept`] or
    /// [`refused`] next).
    Proven {
        hello: Hello,
        master_nonce: [u8; NONCE_LEN],
    },
    /// The peer spoke the protocol but was refused; it was told why.
    Refused(String),
    /// Not a ditto check-in, or silent past the deadline: closed unanswered.
    Dropped(String),
}

/// The store's side, up to the peer's proof, before `deadline`.
pub(crate) fn admit(stream: &mut TcpStream, token: &JobToken, deadline: Instant) -> Admission {
    let dropped = |what: &str, e: std::io::Error| Admission::Dropped(format!("{what}: {e}"));
    // Magic and version first, so a stranger (an HTTP request is shorter than a
    // check-in) or an older peer is told apart before the rest is read.
    let prefix: [u8; 5] = match read_array_by(stream, deadline) {
        Ok(bytes) => bytes,
        Err(e) => return dropped("no check-in", e),
    };
    if &prefix[..4] != MAGIC {
        return Admission::Dropped(format!(
            "not a ditto check-in (it began with {:?})",
            String::from_utf8_lossy(&prefix[..4])
        ));
    }
    let refuse = |stream: &mut TcpStream, reason: String| {
        let _ = write_all_by(stream, &refused(&reason), deadline);
        Admission::Refused(reason)
    };
    if prefix[4] != WIRE_VERSION {
        return refuse(
            stream,
            format!(
                "refused: a check-in of rendezvous wire version {}; this store speaks version \
                 {WIRE_VERSION}: run the same ditto build on every rank",
                prefix[4]
            ),
        );
    }
    let rest: [u8; HELLO_LEN - 5] = match read_array_by(stream, deadline) {
        Ok(bytes) => bytes,
        Err(e) => return dropped("an incomplete check-in", e),
    };
    let word = |at: usize| u32::from_le_bytes(rest[at..at + 4].try_into().expect("4 bytes"));
    let hello = Hello {
        world: word(0),
        rank: word(4),
        nonce: rest[8..].try_into().expect("NONCE_LEN bytes"),
    };
    let Ok(master_nonce) = nonce() else {
        return refuse(stream, "refused: the store has no random source".into());
    };
    let mut challenge = vec![CHALLENGE];
    challenge.extend_from_slice(&master_nonce);
    if let Err(e) = write_all_by(stream, &challenge, deadline) {
        return dropped("writing the challenge", e);
    }
    let proof: [u8; MAC_LEN] = match read_array_by(stream, deadline) {
        Ok(proof) => proof,
        Err(e) => return dropped("no proof", e),
    };
    let claim = Claim {
        side: Side::Peer,
        peer_nonce: &hello.nonce,
        master_nonce: &master_nonce,
        world: hello.world,
        rank: hello.rank,
    };
    if !token.verify(&claim, &proof) {
        let _ = refuse(stream, REFUSED_UNPROVEN.into());
        return Admission::Refused(format!(
            "a check-in as rank {} of {} did not prove the job token",
            hello.rank, hello.world
        ));
    }
    Admission::Proven {
        hello,
        master_nonce,
    }
}

/// Tells a proven peer it is in, with the store's proof.
pub(crate) fn accept(
    stream: &mut TcpStream,
    token: &JobToken,
    hello: &Hello,
    master_nonce: &[u8; NONCE_LEN],
    deadline: Instant,
) -> std::io::Result<()> {
    let proof = token.prove(&Claim {
        side: Side::Master,
        peer_nonce: &hello.nonce,
        master_nonce,
        world: hello.world,
        rank: hello.rank,
    });
    let mut frame = vec![ACCEPTED];
    frame.extend_from_slice(&proof);
    write_all_by(stream, &frame, deadline)
}
