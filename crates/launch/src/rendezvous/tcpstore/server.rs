//! ditto's own store, on rank 0 outside torchrun: a TCPStore server behind the job
//! token's handshake ([`gate`](crate::rendezvous::gate)).
//!
//! An accept loop that never waits on a connection hands each one to a thread of its
//! own, which runs the handshake under one deadline for the whole of it
//! ([`HANDSHAKE_DEADLINE`]) and, once the peer has proven the token, serves its store
//! queries ([`session`](super::session)) for as long as the rank stays connected.
//! Handshakes are capped in all ([`MAX_HANDSHAKES`]) and per source address
//! ([`MAX_HANDSHAKES_PER_SOURCE`]); a new connection over a cap evicts the oldest
//! handshake of its source (or, over the total cap, the oldest of all), which a real
//! rank, three round trips from done, never is for long. So slow or silent strangers
//! delay no rank (a rank's connection is admitted at once), hold a slot for at most the
//! deadline, and strangers from other addresses cannot evict a rank's handshake until
//! they fill every slot. A client whose connection is closed before the challenge
//! connects again.

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::hub::{Handshaking, Hub, LocalStore, RankSlot};
use super::session;
use crate::rendezvous::gate::{self, Admission};
use crate::rendezvous::timed_io::write_all_by;
use crate::rendezvous::{JobToken, Refusal};
use crate::{LaunchError, Result};

/// How long one connection may take from accept to the end of its handshake. A real
/// peer needs three round trips.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(3);
/// The most handshakes under way at once.
pub const MAX_HANDSHAKES: usize = 256;
/// The most handshakes under way from one source address.
pub const MAX_HANDSHAKES_PER_SOURCE: usize = 16;
/// The most handshake threads alive, evicted ones that have not yet ended included;
/// beyond it a connection is closed unread.
const MAX_HANDSHAKE_THREADS: usize = 2 * MAX_HANDSHAKES;
/// The most refusals kept for rank 0's log (a flood of strangers cannot grow it).
const MAX_REFUSALS_KEPT: usize = 256;
/// How often the accept loop looks for connections and for the stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(5);
/// Stack of a handshake / session thread (they hold a few small buffers).
const THREAD_STACK: usize = 256 << 10;

/// Rank 0's store, bound but not yet serving.
#[derive(Debug)]
pub struct StoreServer {
    listener: TcpListener,
    address: SocketAddr,
}

impl StoreServer {
    /// Binds `address`: the first of its resolved addresses that can be bound (e.g.
    /// `MASTER_ADDR:MASTER_PORT`, `0.0.0.0:29500` for every interface, or
    /// `127.0.0.1:0` for a free port).
    pub fn bind(address: impl ToSocketAddrs) -> Result<Self> {
        let listener = TcpListener::bind(address).map_err(|source| LaunchError::Io {
            context: "rendezvous: binding the master's port".into(),
            source,
        })?;
        let address = listener.local_addr().map_err(|source| LaunchError::Io {
            context: "rendezvous: reading the bound address".into(),
            source,
        })?;
        Ok(StoreServer { listener, address })
    }

    /// The address peers connect to.
    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Starts serving ranks `1..world` of the job `token` belongs to, until the returned
    /// handle is dropped.
    pub fn start(self, world: usize, token: &JobToken) -> Result<RunningStore> {
        if world == 0 || u32::try_from(world).is_err() {
            return Err(LaunchError::invalid(
                "StoreServer::start",
                format!("world size {world}; expected 1..={}", u32::MAX),
            ));
        }
        let io = |source| LaunchError::Io {
            context: format!("rendezvous on {}: starting the store", self.address),
            source,
        };
        self.listener.set_nonblocking(true).map_err(io)?;
        let hub = Arc::new(Hub::new(world));
        let (listener, token, shared) = (self.listener, token.clone(), Arc::clone(&hub));
        let accept = std::thread::Builder::new()
            .name("rendezvous-accept".into())
            .spawn(move || accept_loop(&listener, &shared, &token))
            .map_err(io)?;
        Ok(RunningStore {
            hub,
            address: self.address,
            accept: Some(accept),
        })
    }
}

/// A store being served; dropping it stops the store and closes every connection.
#[derive(Debug)]
pub struct RunningStore {
    hub: Arc<Hub>,
    address: SocketAddr,
    accept: Option<JoinHandle<()>>,
}

impl RunningStore {
    /// The address peers connect to.
    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Rank 0's in-process handle on the store.
    #[must_use]
    pub fn local(&self) -> LocalStore {
        LocalStore {
            hub: Arc::clone(&self.hub),
            address: self.address.to_string(),
        }
    }

    /// The ranks whose proven session has closed.
    #[must_use]
    pub fn departed(&self) -> Vec<usize> {
        let state = self.hub.lock();
        (0..state.ranks.len())
            .filter(|&r| matches!(state.ranks[r], RankSlot::Gone(_)))
            .collect()
    }

    /// Why the job cannot form as launched, when a proven rank said so (another world
    /// size, a rank outside `1..world`).
    #[must_use]
    pub fn trouble(&self) -> Option<String> {
        self.hub.lock().trouble.clone()
    }

    /// The connections turned away since the last call, for rank 0 to log.
    pub fn take_refusals(&self) -> Vec<Refusal> {
        std::mem::take(&mut self.hub.lock().refusals)
    }

    /// Waits until none of `ranks` has an open session, or `deadline`: after a failed
    /// rendezvous, so that the peers read their verdicts before rank 0 exits.
    pub(crate) fn drain(&self, ranks: &[usize], deadline: Instant) {
        let mut state = self.hub.lock();
        loop {
            let open = ranks
                .iter()
                .any(|&r| matches!(state.ranks.get(r), Some(RankSlot::Live(_))));
            let left = deadline.saturating_duration_since(Instant::now());
            if !open || left.is_zero() {
                return;
            }
            state = self.hub.wait_change(state, left);
        }
    }
}

impl Drop for RunningStore {
    fn drop(&mut self) {
        {
            let mut state = self.hub.lock();
            state.stop = true;
            for stream in state.open.values() {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
        self.hub.changed.notify_all();
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, hub: &Arc<Hub>, token: &JobToken) {
    loop {
        if hub.lock().stop {
            return;
        }
        match listener.accept() {
            Ok((stream, from)) => start_handshake(stream, from, hub, token),
            // Nothing queued, or a connection that failed between SYN and accept (the
            // stranger's problem), or a resource limit (the next poll retries).
            Err(_) => std::thread::sleep(ACCEPT_POLL),
        }
    }
}

/// Hands `stream` to a thread of its own, evicting the oldest handshake of its source
/// (or of all) when a cap is reached; closes it unread only when even the evicted
/// handshakes' threads have not ended yet.
fn start_handshake(stream: TcpStream, from: SocketAddr, hub: &Arc<Hub>, token: &JobToken) {
    let source = from.ip();
    let Ok(handle_to_end) = stream.try_clone() else {
        return;
    };
    let id = {
        let mut state = hub.lock();
        if state.handshake_threads >= MAX_HANDSHAKE_THREADS {
            return;
        }
        let from_source = state
            .handshakes
            .iter()
            .filter(|h| h.source == source)
            .count();
        let evict = if from_source >= MAX_HANDSHAKES_PER_SOURCE {
            state.handshakes.iter().position(|h| h.source == source)
        } else if state.handshakes.len() >= MAX_HANDSHAKES {
            Some(0)
        } else {
            None
        };
        if let Some(oldest) = evict.and_then(|at| state.handshakes.remove(at)) {
            let _ = oldest.stream.shutdown(std::net::Shutdown::Both);
        }
        let id = state.next_id;
        state.next_id += 1;
        state.handshake_threads += 1;
        state.handshakes.push_back(Handshaking {
            id,
            source,
            stream: handle_to_end,
        });
        id
    };
    let (shared, token) = (Arc::clone(hub), token.clone());
    let spawned = std::thread::Builder::new()
        .name("rendezvous-peer".into())
        .stack_size(THREAD_STACK)
        .spawn(move || {
            let tracked = shared.track(&stream);
            handle(stream, from, id, &shared, &token);
            shared.untrack(tracked);
            shared.lock().handshake_threads -= 1;
        });
    if spawned.is_err() {
        end_handshake(hub, id);
        hub.lock().handshake_threads -= 1;
    }
}

/// Takes handshake `id` off the list (if it was not evicted).
fn end_handshake(hub: &Hub, id: u64) {
    let mut state = hub.lock();
    if let Some(at) = state.handshakes.iter().position(|h| h.id == id) {
        state.handshakes.remove(at);
    }
}

fn refuse_later(hub: &Hub, from: SocketAddr, reason: String) {
    let mut state = hub.lock();
    if state.refusals.len() < MAX_REFUSALS_KEPT {
        state.refusals.push(Refusal { from, reason });
    }
}

/// One connection: the handshake, then (for a proven rank that fits the job) its session.
fn handle(mut stream: TcpStream, from: SocketAddr, id: u64, hub: &Hub, token: &JobToken) {
    let deadline = Instant::now() + HANDSHAKE_DEADLINE;
    let admission = stream.set_nonblocking(false).map_or_else(
        |e| Admission::Dropped(e.to_string()),
        |()| gate::admit(&mut stream, token, deadline),
    );
    let (hello, master_nonce) = match admission {
        Admission::Proven {
            hello,
            master_nonce,
        } => (hello, master_nonce),
        Admission::Refused(reason) | Admission::Dropped(reason) => {
            end_handshake(hub, id);
            return refuse_later(hub, from, reason);
        }
    };
    let (rank, world) = (hello.rank as usize, hello.world as usize);
    let refusal = {
        let mut state = hub.lock();
        // Off the eviction list before anything is filed: either it was evicted already
        // (its socket is shut; drop it), or it can no longer be.
        let Some(at) = state.handshakes.iter().position(|h| h.id == id) else {
            return;
        };
        state.handshakes.remove(at);
        let ours = state.ranks.len();
        if world != ours || rank == 0 || rank >= ours {
            let why = format!(
                "rank {rank} at {from} was launched for world size {world}, with RANK={rank}; \
                 this job has world size {ours} and ranks 1..={} connect to rank 0",
                ours - 1
            );
            state.trouble.get_or_insert(why.clone());
            Some(why)
        } else {
            match state.ranks[rank] {
                RankSlot::Empty => {
                    state.ranks[rank] = RankSlot::Live(from);
                    None
                }
                RankSlot::Live(first) | RankSlot::Gone(first) => Some(format!(
                    "rank {rank} already checked in from {first}; this second check-in as rank \
                     {rank} from {from} is refused (two processes launched with RANK={rank}?)"
                )),
            }
        }
    };
    hub.changed.notify_all();
    if let Some(reason) = refusal {
        let _ = write_all_by(&mut stream, &gate::refused(&reason), deadline);
        return refuse_later(hub, from, reason);
    }
    // A peer that vanished before hearing it was accepted never had a session.
    let admitted = gate::accept(&mut stream, token, &hello, &master_nonce, deadline).is_ok();
    if admitted {
        let _why_it_ended = session::serve(&mut stream, hub);
    }
    let mut state = hub.lock();
    if !state.stop {
        state.ranks[rank] = if admitted {
            RankSlot::Gone(from)
        } else {
            RankSlot::Empty
        };
    }
    drop(state);
    hub.changed.notify_all();
}
