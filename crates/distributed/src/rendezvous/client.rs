//! A non-zero rank's side of the rendezvous: connect, check in, prove the job token,
//! receive the payload.

use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::token::{nonce, Claim, JobToken, Side, MAC_LEN, NONCE_LEN};
use super::wire::{self, Hello, CHALLENGE, CHALLENGE_LEN, MAX_PAYLOAD, MAX_REASON};
use super::{POLL, VERDICT_GRACE};
use crate::{DistError, Result};

/// Connects to the master at `address` (retrying until it is up), checks in as `rank`
/// of `world`, proves `token` (and checks the master's proof of it, so a rank never
/// takes another job's payload: another job's master is a typed error) and returns the master's payload. Bounded by `timeout`
/// (plus a short grace to hear the master's verdict).
pub fn fetch(
    address: impl ToSocketAddrs,
    rank: usize,
    world: usize,
    token: &JobToken,
    timeout: Duration,
) -> Result<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let target: Vec<SocketAddr> = address
        .to_socket_addrs()
        .map_err(|source| DistError::Io {
            context: "rendezvous: resolving the master's address".into(),
            source,
        })?
        .collect();
    let Some(&target) = target.first() else {
        return Err(DistError::invalid(
            "rendezvous",
            "the master's address resolves to nothing",
        ));
    };
    let shown = target.to_string();
    let (Ok(world32), Ok(rank32)) = (u32::try_from(world), u32::try_from(rank)) else {
        return Err(DistError::invalid(
            "rendezvous",
            format!("world size {world} does not fit the wire format's u32"),
        ));
    };
    if rank == 0 || rank >= world {
        return Err(DistError::invalid(
            "rendezvous",
            format!("rank {rank} cannot fetch; expected 1..{world}"),
        ));
    }
    let mut stream = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(DistError::Timeout {
                op: format!("rendezvous: connecting to the master at {shown}"),
                timeout,
                missing: vec![0],
            });
        }
        match TcpStream::connect_timeout(&target, left.min(Duration::from_secs(1))) {
            Ok(stream) => break stream,
            Err(_) => std::thread::sleep(POLL.max(Duration::from_millis(50)).min(left)),
        }
    };
    let io = |source| DistError::Io {
        context: format!("rendezvous with {shown}"),
        source,
    };
    let hello = Hello {
        world: world32,
        rank: rank32,
        nonce: nonce()?,
    };
    stream.write_all(&hello.to_bytes()).map_err(io)?;
    let wait = deadline.saturating_duration_since(Instant::now()) + VERDICT_GRACE;
    stream.set_read_timeout(Some(wait)).map_err(io)?;
    let mut status = read_status(&mut stream, timeout)?;
    if status == CHALLENGE {
        let body: [u8; CHALLENGE_LEN] = wire::read_array(&mut stream).map_err(io)?;
        let challenge: [u8; NONCE_LEN] = body[..NONCE_LEN].try_into().expect("nonce");
        let master_proof: [u8; MAC_LEN] = body[NONCE_LEN..].try_into().expect("MAC");
        // Answer first, so a master of another job hears (and logs) why it refuses
        // this rank; the answer is a MAC over its fresh nonce, useless to anyone else.
        let answer = token.prove(&Claim {
            side: Side::Peer,
            challenge: &challenge,
            own_nonce: &hello.nonce,
            world: world32,
            rank: rank32,
        });
        stream.write_all(&answer).map_err(io)?;
        let master = Claim {
            side: Side::Master,
            challenge: &hello.nonce,
            own_nonce: &challenge,
            world: world32,
            rank: rank32,
        };
        if !token.verify(&master, &master_proof) {
            return Err(DistError::Rendezvous {
                address: shown,
                message: format!(
                    "the master did not prove this job's token (job id {:?}): another job is \
                     using this port, or DITTO_JOB_ID / DITTO_RENDEZVOUS_SECRET differ",
                    token.job_id()
                ),
            });
        }
        status = read_status(&mut stream, timeout)?;
    }
    read_verdict(&mut stream, status, world, timeout, &shown)
}

/// The next status byte; a silence past the deadline is a timeout naming rank 0, a
/// closed connection means rank 0 went away.
fn read_status(stream: &mut TcpStream, timeout: Duration) -> Result<u8> {
    match wire::read_array::<1>(stream) {
        Ok([status]) => Ok(status),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            Err(DistError::Timeout {
                op: "rendezvous: waiting for the master".into(),
                timeout,
                missing: vec![0],
            })
        }
        Err(_) => Err(DistError::PeerExited {
            op: "rendezvous".into(),
            sequence: None,
            ranks: vec![0],
        }),
    }
}

/// The master's verdict after `status`; every length is checked against its cap
/// before anything is allocated for it.
fn read_verdict(
    stream: &mut TcpStream,
    status: u8,
    world: usize,
    timeout: Duration,
    shown: &str,
) -> Result<Vec<u8>> {
    let io = |source| DistError::Io {
        context: format!("rendezvous with {shown}"),
        source,
    };
    let refused = |message: String| DistError::Rendezvous {
        address: shown.to_string(),
        message,
    };
    match status {
        wire::GO | wire::REFUSED => {
            let len = wire::read_u32(stream).map_err(io)?;
            let cap = if status == wire::GO {
                MAX_PAYLOAD
            } else {
                MAX_REASON
            };
            if len > cap {
                return Err(refused(format!(
                    "the master announced {len} bytes, more than {cap}"
                )));
            }
            let mut body = vec![0u8; len as usize];
            std::io::Read::read_exact(stream, &mut body).map_err(io)?;
            if status == wire::GO {
                Ok(body)
            } else {
                Err(refused(String::from_utf8_lossy(&body).into_owned()))
            }
        }
        wire::TIMED_OUT | wire::PEER_EXITED => {
            let count = wire::read_u32(stream).map_err(io)?;
            if count as usize > world {
                return Err(refused(format!(
                    "the master named {count} ranks, more than the world size {world}"
                )));
            }
            let ranks = (0..count)
                .map(|_| wire::read_u32(stream).map(|r| r as usize).map_err(io))
                .collect::<Result<Vec<_>>>()?;
            Err(if status == wire::TIMED_OUT {
                DistError::Timeout {
                    op: "rendezvous".into(),
                    timeout,
                    missing: ranks,
                }
            } else {
                DistError::PeerExited {
                    op: "rendezvous".into(),
                    sequence: None,
                    ranks,
                }
            })
        }
        other => Err(refused(format!("unknown reply status {other}"))),
    }
}
