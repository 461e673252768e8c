//! Rank 0's side of the rendezvous: accepts connections, proves and checks the job token
//! of each in a handshake thread of its own (so a silent or slow connection holds up
//! nothing), files each proven check-in under its rank, and sends the payload once every
//! rank is in.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::token::{nonce, Claim, JobToken, Side, MAC_LEN};
use super::wire::{
    self, Hello, CHALLENGE, HELLO_REST_LEN, MAGIC, MAX_PAYLOAD, PREFIX_LEN, VERSION,
};
use super::{Refusal, POLL};
use crate::{DistError, Result};

/// How long one connection may take to check in and answer its challenge. A real
/// peer answers in microseconds; this only bounds how long a handshake thread lives.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// The most handshakes at once; further connections are closed unread until some end
/// (a flood of idle connections cannot exhaust the master's threads).
const MAX_HANDSHAKES: usize = 64;
/// The most connections still queued on the listener that hear a failed rendezvous's
/// verdict.
const MAX_LATE: usize = 16;
/// How long a verdict may take to write to a peer that does not read.
const WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Rank 0's side: a bound listener, ready to [`serve`](Self::serve).
#[derive(Debug)]
pub struct RendezvousServer {
    listener: TcpListener,
    address: SocketAddr,
}

/// What a handshake thread reports.
enum Arrival {
    /// A peer that proved the job token, with what it claims.
    Proven {
        stream: TcpStream,
        from: SocketAddr,
        hello: Hello,
    },
    /// A connection turned away (and told why, if it spoke the protocol).
    Refused(Refusal),
}

/// A connected peer that proved the token, waiting for the verdict.
struct Slot {
    stream: TcpStream,
    from: SocketAddr,
}

impl RendezvousServer {
    /// Binds `address` (e.g. `MASTER_ADDR:MASTER_PORT`, `0.0.0.0:29500` for every
    /// interface, or `127.0.0.1:0` for a free port).
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

    /// Waits (at most `timeout`) for ranks `1..world` to check in and prove `token`,
    /// then sends each of them `payload`. Returns the connections it turned away (wrong
    /// token, a rank already checked in, an older protocol, not a ditto check-in), for
    /// the caller to log; none of them took a slot.
    pub fn serve(
        self,
        world: usize,
        token: &JobToken,
        payload: &[u8],
        timeout: Duration,
    ) -> Result<Vec<Refusal>> {
        let address = self.address.to_string();
        if payload.len() > MAX_PAYLOAD as usize {
            return Err(DistError::invalid(
                "rendezvous",
                format!("payload of {} bytes exceeds {MAX_PAYLOAD}", payload.len()),
            ));
        }
        if world == 0 || u32::try_from(world).is_err() {
            return Err(DistError::invalid(
                "rendezvous",
                format!("world size {world}; expected 1..={}", u32::MAX),
            ));
        }
        self.listener
            .set_nonblocking(true)
            .map_err(|source| DistError::Io {
                context: format!("rendezvous on {address}: configuring the listener"),
                source,
            })?;
        let deadline = Instant::now() + timeout;
        let (arrivals, arrived) = channel();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let mut slots: Vec<Option<Slot>> = (0..world).map(|_| None).collect();
        let mut refusals = Vec::new();
        let missing = |slots: &[Option<Slot>]| -> Vec<usize> {
            (1..world).filter(|&q| slots[q].is_none()).collect()
        };
        loop {
            // A rank that checked in and left must not be handed a go.
            let gone = closed_slots(&slots);
            if !gone.is_empty() {
                self.tell_everyone(&mut slots, &arrived, &wire::ranks(wire::PEER_EXITED, &gone));
                return Err(DistError::PeerExited {
                    op: "rendezvous".into(),
                    sequence: None,
                    ranks: gone,
                });
            }
            if missing(&slots).is_empty() {
                let reply = wire::go(payload);
                for slot in slots.iter_mut().flatten() {
                    // A peer that vanished now will fail on its own side; nothing to undo.
                    let _ = slot.stream.write_all(&reply);
                }
                return Ok(refusals);
            }
            if Instant::now() >= deadline {
                let absent = missing(&slots);
                self.tell_everyone(&mut slots, &arrived, &wire::ranks(wire::TIMED_OUT, &absent));
                return Err(DistError::Timeout {
                    op: "rendezvous".into(),
                    timeout,
                    missing: absent,
                });
            }
            while let Ok(arrival) = arrived.try_recv() {
                match arrival {
                    Arrival::Refused(refusal) => refusals.push(refusal),
                    Arrival::Proven {
                        stream,
                        from,
                        hello,
                    } => {
                        if let Err(e) = file(
                            &mut slots,
                            &mut refusals,
                            world,
                            stream,
                            from,
                            hello,
                            &address,
                        ) {
                            let reason = "the master refused another rank's check-in";
                            self.tell_everyone(&mut slots, &arrived, &wire::refused(reason));
                            return Err(e);
                        }
                    }
                }
            }
            match self.listener.accept() {
                Ok((stream, from)) => {
                    start_handshake(stream, from, token, deadline, &arrivals, &in_flight)
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // A connection that failed between SYN and accept (reset, aborted) is
                // the stranger's problem, not the job's.
                Err(e) if is_per_connection(&e) => {}
                Err(source) => {
                    return Err(DistError::Io {
                        context: format!("rendezvous on {address}: accept"),
                        source,
                    })
                }
            }
        }
    }

    /// Before giving up: tells every peer in a slot, every proven peer not yet filed and
    /// every check-in still queued on the listener why the rendezvous failed (closing
    /// the listener would reset their connections, and they would blame rank 0).
    fn tell_everyone(
        &self,
        slots: &mut [Option<Slot>],
        arrived: &Receiver<Arrival>,
        verdict: &[u8],
    ) {
        let mut late: Vec<TcpStream> = arrived
            .try_iter()
            .filter_map(|a| match a {
                Arrival::Proven { stream, .. } => Some(stream),
                Arrival::Refused(_) => None,
            })
            .collect();
        // A few only: each read may wait 200 ms, and strangers can fill the queue.
        for _ in 0..MAX_LATE {
            let Ok((mut stream, _)) = self.listener.accept() else {
                break;
            };
            let mut hello = [0u8; PREFIX_LEN + HELLO_REST_LEN];
            let read = stream
                .set_nonblocking(false)
                .and_then(|()| stream.set_read_timeout(Some(Duration::from_millis(200))))
                .and_then(|()| stream.read_exact(&mut hello));
            if read.is_ok() && hello.starts_with(MAGIC) {
                late.push(stream);
            }
        }
        let streams = slots.iter_mut().flatten().map(|s| &mut s.stream);
        for stream in streams.chain(late.iter_mut()) {
            let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
            let _ = stream.write_all(verdict);
        }
    }
}

/// Accept errors that concern one connection only.
fn is_per_connection(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::TimedOut
    )
}

/// Files a proven check-in under its rank. A rank already filed is refused (the first
/// keeps its slot: two processes launched with the same `RANK`); a world size or rank
/// that does not fit this job fails the rendezvous, since a rank of this job (it knows
/// the token) was launched wrong and the job cannot form as launched.
fn file(
    slots: &mut [Option<Slot>],
    refusals: &mut Vec<Refusal>,
    world: usize,
    mut stream: TcpStream,
    from: SocketAddr,
    hello: Hello,
    address: &str,
) -> Result<()> {
    let (their_world, rank) = (hello.world as usize, hello.rank as usize);
    let mut refuse = |reason: String| {
        let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
        let _ = stream.write_all(&wire::refused(&reason));
        reason
    };
    if their_world != world {
        let reason = refuse(format!(
            "rank {rank} at {from} expects world size {their_world}, the master {world}"
        ));
        return Err(DistError::Rendezvous {
            address: address.into(),
            message: reason,
        });
    }
    if rank == 0 || rank >= world {
        let reason = refuse(format!(
            "a peer at {from} checked in as rank {rank}; expected a rank in 1..={}",
            world - 1
        ));
        return Err(DistError::Rendezvous {
            address: address.into(),
            message: reason,
        });
    }
    if let Some(first) = &slots[rank] {
        let reason = refuse(format!(
            "rank {rank} is already checked in from {}; this second check-in as rank {rank} \
             from {from} is refused (two processes launched with RANK={rank}?)",
            first.from
        ));
        refusals.push(Refusal { from, reason });
        return Ok(());
    }
    slots[rank] = Some(Slot { stream, from });
    Ok(())
}

/// Runs one connection's handshake on a thread of its own, unless [`MAX_HANDSHAKES`]
/// are under way (then the connection is closed unread).
fn start_handshake(
    stream: TcpStream,
    from: SocketAddr,
    token: &JobToken,
    deadline: Instant,
    arrivals: &Sender<Arrival>,
    in_flight: &Arc<AtomicUsize>,
) {
    if in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_HANDSHAKES {
        in_flight.fetch_sub(1, Ordering::SeqCst);
        return;
    }
    let (token, arrivals, counter) = (token.clone(), arrivals.clone(), Arc::clone(in_flight));
    let limit = deadline
        .saturating_duration_since(Instant::now())
        .clamp(POLL, HANDSHAKE_TIMEOUT);
    let spawned = std::thread::Builder::new()
        .name("rendezvous-handshake".into())
        .spawn(move || {
            if let Some(arrival) = handshake(stream, from, &token, limit) {
                // The master may have returned already; then nobody listens.
                let _ = arrivals.send(arrival);
            }
            counter.fetch_sub(1, Ordering::SeqCst);
        });
    if spawned.is_err() {
        // No thread to spare: the closure (and the connection in it) is dropped, which
        // closes the connection; its place is free again.
        in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One connection: its check-in, the challenge (with the master's own proof), the
/// peer's answer. `None` for a connection that is not a ditto check-in at all (an HTTP
/// request, a port scan) or that said nothing in time: it is closed unanswered.
fn handshake(
    mut stream: TcpStream,
    from: SocketAddr,
    token: &JobToken,
    limit: Duration,
) -> Option<Arrival> {
    stream.set_nonblocking(false).ok()?;
    stream.set_read_timeout(Some(limit)).ok()?;
    stream.set_write_timeout(Some(limit)).ok()?;
    let refuse = |mut stream: &TcpStream, reason: String| {
        let _ = stream.write_all(&wire::refused(&reason));
        Some(Arrival::Refused(Refusal { from, reason }))
    };
    let prefix: [u8; PREFIX_LEN] = wire::read_array(&mut stream).ok()?;
    if &prefix[..4] != MAGIC {
        return Some(Arrival::Refused(Refusal {
            from,
            reason: format!(
                "not a ditto rendezvous check-in (it began with {:?})",
                String::from_utf8_lossy(&prefix)
            ),
        }));
    }
    if prefix[4] != VERSION {
        return refuse(
            &stream,
            format!(
                "a check-in of wire version {}; this master speaks version {VERSION} \
             (job token): run the same ditto build on every rank",
                prefix[4]
            ),
        );
    }
    let rest: [u8; HELLO_REST_LEN] = wire::read_array(&mut stream).ok()?;
    let hello = Hello::from_rest(&rest);
    let Ok(own) = nonce() else {
        return refuse(
            &stream,
            "the master has no random source for a challenge".into(),
        );
    };
    let proof = token.prove(&Claim {
        side: Side::Master,
        challenge: &hello.nonce,
        own_nonce: &own,
        world: hello.world,
        rank: hello.rank,
    });
    let mut challenge = vec![CHALLENGE];
    challenge.extend_from_slice(&own);
    challenge.extend_from_slice(&proof);
    stream.write_all(&challenge).ok()?;
    let answer: [u8; MAC_LEN] = wire::read_array(&mut stream).ok()?;
    let peer = Claim {
        side: Side::Peer,
        challenge: &own,
        own_nonce: &hello.nonce,
        world: hello.world,
        rank: hello.rank,
    };
    if !token.verify(&peer, &answer) {
        return refuse(
            &stream,
            format!(
            "a check-in as rank {} from {from} did not prove this job's token (job id {:?}{}): \
             it belongs to another job, or its DITTO_JOB_ID / DITTO_RENDEZVOUS_SECRET differ",
            hello.rank,
            token.job_id(),
            if token.has_secret() { ", with a secret" } else { "" }
        ),
        );
    }
    Some(Arrival::Proven {
        stream,
        from,
        hello,
    })
}

/// The ranks whose connection has closed (a peer that exited after checking in).
fn closed_slots(slots: &[Option<Slot>]) -> Vec<usize> {
    let mut gone = Vec::new();
    for (rank, slot) in slots.iter().enumerate() {
        let Some(slot) = slot else { continue };
        let mut byte = [0u8; 1];
        let closed = match slot
            .stream
            .set_nonblocking(true)
            .and_then(|()| slot.stream.peek(&mut byte))
        {
            Ok(0) => true,
            Ok(_) => false, // a peer has nothing more to say; ignore it
            Err(e) => e.kind() != ErrorKind::WouldBlock,
        };
        let _ = slot.stream.set_nonblocking(false);
        if closed {
            gone.push(rank);
        }
    }
    gone
}
