//! A small TCP rendezvous store on the master: how NCCL's 128-byte id reaches every
//! rank (PyTorch's `TCPStore` plays this part under torchrun). Bootstrap only: it moves
//! one payload from rank 0 to the others, never tensor data.
//!
//! Rank 0 listens on `MASTER_ADDR:MASTER_PORT`; every other rank connects (retrying
//! while the master is not up yet) and checks in with its rank. When all `world - 1`
//! peers are in, the master sends each of them the payload. Everything is bounded by
//! one timeout:
//!
//! - a rank that never checks in: the master answers every connected peer with the
//!   missing ranks and returns [`DistError::Timeout`] naming them; the peers return the
//!   same error;
//! - a rank that checks in and then exits (its connection closes): the master notices
//!   at once, and every rank returns [`DistError::PeerExited`] naming it;
//! - a master that never comes up or goes away: the peers return `Timeout` /
//!   `PeerExited` naming rank 0.
//!
//! Wire format (little-endian): check-in `b"DTRV"`, version u8 = 1, world u32, rank
//! u32. Reply: status u8 (0 = go, 1 = timed out, 2 = a peer exited, 3 = refused),
//! then for 0 a u32 length and the payload; for 1 and 2 a u32 count and that many u32
//! ranks; for 3 a u32 length and a UTF-8 reason.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::{DistError, Result};

const MAGIC: &[u8; 4] = b"DTRV";
const VERSION: u8 = 1;
const CHECK_IN_LEN: usize = 4 + 1 + 4 + 4;
/// The largest payload accepted (NCCL's id is 128 bytes).
const MAX_PAYLOAD: u32 = 1 << 16;
/// How often the master looks for new peers and closed connections.
const POLL: Duration = Duration::from_millis(10);
/// How long peers wait beyond the timeout for the master's verdict (which names the
/// missing ranks), before concluding the master itself is gone.
const VERDICT_GRACE: Duration = Duration::from_secs(2);

const GO: u8 = 0;
const TIMED_OUT: u8 = 1;
const PEER_EXITED: u8 = 2;
const REFUSED: u8 = 3;

/// Rank 0's side: a bound listener, ready to [`serve`](Self::serve).
#[derive(Debug)]
pub struct RendezvousServer {
    listener: TcpListener,
    address: SocketAddr,
}

impl RendezvousServer {
    /// Binds `address` (e.g. `0.0.0.0:29500`, or `127.0.0.1:0` for a free port).
    pub fn bind(address: impl ToSocketAddrs) -> Result<Self> {
        let listener = TcpListener::bind(address).map_err(|source| DistError::Io {
            context: "rendezvous: binding the master's port".into(),
            source,
        })?;
        let address = listener.local_addr().map_err(|source| DistError::Io {
            context: "rendezvous: reading the bound address".into(),
            source,
        })?;
        Ok(RendezvousServer { listener, address })
    }

    /// The address peers connect to.
    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Waits (at most `timeout`) for ranks `1..world` to check in, then sends each of
    /// them `payload`.
    pub fn serve(self, world: usize, payload: &[u8], timeout: Duration) -> Result<()> {
        let address = self.address.to_string();
        if payload.len() > MAX_PAYLOAD as usize {
            return Err(DistError::invalid(
                "rendezvous",
                format!("payload of {} bytes exceeds {MAX_PAYLOAD}", payload.len()),
            ));
        }
        set_nonblocking(&self.listener, true, &address)?;
        let deadline = Instant::now() + timeout;
        let mut peers: Vec<Option<TcpStream>> = (0..world).map(|_| None).collect();
        let missing = |peers: &[Option<TcpStream>]| -> Vec<usize> {
            (1..world).filter(|&q| peers[q].is_none()).collect()
        };
        loop {
            // A rank that checked in and left must not be handed a go.
            let gone = closed_peers(&peers);
            if !gone.is_empty() {
                admit_late(&self.listener, &mut peers);
                abort(&mut peers, PEER_EXITED, &gone);
                return Err(DistError::PeerExited {
                    op: "rendezvous".into(),
                    ranks: gone,
                });
            }
            if missing(&peers).is_empty() {
                let mut reply = vec![GO];
                reply.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                reply.extend_from_slice(payload);
                for peer in peers.iter_mut().flatten() {
                    // A peer that vanished now will fail on its own side; nothing to undo.
                    let _ = peer.write_all(&reply);
                }
                return Ok(());
            }
            if Instant::now() >= deadline {
                let absent = missing(&peers);
                admit_late(&self.listener, &mut peers);
                abort(&mut peers, TIMED_OUT, &absent);
                return Err(DistError::Timeout {
                    op: "rendezvous".into(),
                    timeout,
                    missing: absent,
                });
            }
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if let Err(e) = admit(stream, world, &mut peers, deadline, &address) {
                        abort(&mut peers, REFUSED, &[]);
                        return Err(e);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
                Err(source) => {
                    return Err(DistError::Io {
                        context: format!("rendezvous on {address}: accept"),
                        source,
                    })
                }
            }
        }
    }
}

fn set_nonblocking(listener: &TcpListener, on: bool, address: &str) -> Result<()> {
    listener
        .set_nonblocking(on)
        .map_err(|source| DistError::Io {
            context: format!("rendezvous on {address}: configuring the listener"),
            source,
        })
}

/// Reads a new connection's check-in and files it under its rank; refuses (and fails
/// the rendezvous for) a wrong protocol, world size or rank, or a rank seen twice.
fn admit(
    mut stream: TcpStream,
    world: usize,
    peers: &mut [Option<TcpStream>],
    deadline: Instant,
    address: &str,
) -> Result<()> {
    let refuse = |mut stream: TcpStream, reason: String| {
        let mut reply = vec![REFUSED];
        reply.extend_from_slice(&(reason.len() as u32).to_le_bytes());
        reply.extend_from_slice(reason.as_bytes());
        let _ = stream.write_all(&reply);
        Err(DistError::Rendezvous {
            address: address.to_string(),
            message: reason,
        })
    };
    let io = |source| DistError::Io {
        context: format!("rendezvous on {address}: reading a check-in"),
        source,
    };
    stream.set_nonblocking(false).map_err(io)?;
    // A real peer sends its check-in right after connecting; do not let a silent
    // connection hold up the master's watch over the others for long.
    let wait = deadline
        .saturating_duration_since(Instant::now())
        .clamp(POLL, Duration::from_secs(1));
    stream.set_read_timeout(Some(wait)).map_err(io)?;
    let mut hello = [0u8; CHECK_IN_LEN];
    if stream.read_exact(&mut hello).is_err() {
        // Not one of ours (a port scan, a peer dying mid-hello): ignore it.
        return Ok(());
    }
    if &hello[..4] != MAGIC || hello[4] != VERSION {
        return refuse(
            stream,
            format!(
                "a connection sent {:02x?}, not a ditto rendezvous check-in (version {VERSION})",
                &hello[..5]
            ),
        );
    }
    let their_world = u32::from_le_bytes(hello[5..9].try_into().expect("4 bytes")) as usize;
    let rank = u32::from_le_bytes(hello[9..13].try_into().expect("4 bytes")) as usize;
    if their_world != world {
        return refuse(
            stream,
            format!("rank {rank} expects world size {their_world}, the master {world}"),
        );
    }
    if rank == 0 || rank >= world {
        return refuse(
            stream,
            format!("rank {rank} checked in; expected a rank in 1..{world}"),
        );
    }
    if peers[rank].is_some() {
        return refuse(stream, format!("rank {rank} checked in twice"));
    }
    peers[rank] = Some(stream);
    Ok(())
}

/// Before giving up: takes in the connections still queued on the listener, so that
/// ranks that arrived just now hear the verdict too (closing the listener would reset
/// their connections, and they would blame rank 0). Their check-ins are read and
/// dropped; they get the same reply as everyone.
fn admit_late(listener: &TcpListener, peers: &mut Vec<Option<TcpStream>>) {
    while let Ok((mut stream, _)) = listener.accept() {
        let mut hello = [0u8; CHECK_IN_LEN];
        let read = stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_read_timeout(Some(Duration::from_millis(200))))
            .and_then(|()| stream.read_exact(&mut hello));
        if read.is_ok() {
            peers.push(Some(stream));
        }
    }
}

/// The ranks whose connection has closed (a peer that exited after checking in).
fn closed_peers(peers: &[Option<TcpStream>]) -> Vec<usize> {
    let mut gone = Vec::new();
    for (rank, peer) in peers.iter().enumerate() {
        let Some(stream) = peer else { continue };
        let mut byte = [0u8; 1];
        let closed = match stream
            .set_nonblocking(true)
            .and_then(|()| stream.peek(&mut byte))
        {
            Ok(0) => true,
            Ok(_) => false, // a peer has nothing more to say; ignore it
            Err(e) => e.kind() != ErrorKind::WouldBlock,
        };
        let _ = stream.set_nonblocking(false);
        if closed {
            gone.push(rank);
        }
    }
    gone
}

/// Tells every connected peer why the rendezvous failed.
fn abort(peers: &mut [Option<TcpStream>], status: u8, ranks: &[usize]) {
    let mut reply = vec![status];
    if status == REFUSED {
        let reason = "the master refused another rank's check-in";
        reply.extend_from_slice(&(reason.len() as u32).to_le_bytes());
        reply.extend_from_slice(reason.as_bytes());
    } else {
        reply.extend_from_slice(&(ranks.len() as u32).to_le_bytes());
        for &r in ranks {
            reply.extend_from_slice(&(r as u32).to_le_bytes());
        }
    }
    for peer in peers.iter_mut().flatten() {
        let _ = peer.write_all(&reply);
    }
}

/// A non-zero rank's side: connects to the master at `address` (retrying until it is
/// up), checks in as `rank` of `world` and returns the master's payload. Bounded by
/// `timeout` (plus a short grace to hear the master's verdict).
pub fn fetch(
    address: impl ToSocketAddrs,
    rank: usize,
    world: usize,
    timeout: Duration,
) -> Result<Vec<u8>> {
    let started = Instant::now();
    let deadline = started + timeout;
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
    let mut hello = Vec::with_capacity(CHECK_IN_LEN);
    hello.extend_from_slice(MAGIC);
    hello.push(VERSION);
    hello.extend_from_slice(&(world as u32).to_le_bytes());
    hello.extend_from_slice(&(rank as u32).to_le_bytes());
    stream.write_all(&hello).map_err(io)?;
    let wait = deadline.saturating_duration_since(Instant::now()) + VERDICT_GRACE;
    stream.set_read_timeout(Some(wait)).map_err(io)?;
    let mut status = [0u8; 1];
    match stream.read_exact(&mut status) {
        Ok(()) => {}
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            return Err(DistError::Timeout {
                op: format!("rendezvous: waiting for the master at {shown}"),
                timeout,
                missing: vec![0],
            })
        }
        Err(_) => {
            return Err(DistError::PeerExited {
                op: "rendezvous".into(),
                ranks: vec![0],
            })
        }
    }
    let read_u32 = |stream: &mut TcpStream| -> Result<u32> {
        let mut word = [0u8; 4];
        stream.read_exact(&mut word).map_err(io)?;
        Ok(u32::from_le_bytes(word))
    };
    match status[0] {
        GO | REFUSED => {
            let len = read_u32(&mut stream)?;
            if len > MAX_PAYLOAD {
                return Err(DistError::Rendezvous {
                    address: shown,
                    message: format!("the master announced {len} bytes, more than {MAX_PAYLOAD}"),
                });
            }
            let mut body = vec![0u8; len as usize];
            stream.read_exact(&mut body).map_err(io)?;
            if status[0] == GO {
                Ok(body)
            } else {
                Err(DistError::Rendezvous {
                    address: shown,
                    message: String::from_utf8_lossy(&body).into_owned(),
                })
            }
        }
        TIMED_OUT | PEER_EXITED => {
            let count = read_u32(&mut stream)?.min(1 << 20);
            let ranks = (0..count)
                .map(|_| read_u32(&mut stream).map(|r| r as usize))
                .collect::<Result<Vec<_>>>()?;
            Err(if status[0] == TIMED_OUT {
                DistError::Timeout {
                    op: "rendezvous".into(),
                    timeout,
                    missing: ranks,
                }
            } else {
                DistError::PeerExited {
                    op: "rendezvous".into(),
                    ranks,
                }
            })
        }
        other => Err(DistError::Rendezvous {
            address: shown,
            message: format!("unknown reply status {other}"),
        }),
    }
}
