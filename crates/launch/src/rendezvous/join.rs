//! A rank's way into the job's store, chosen from the launch: torchrun's agent store
//! when torchrun says it hosts one (`TORCHELASTIC_USE_AGENT_STORE=True`; no rank binds
//! a port), Horovod's rendezvous server under horovodrun, else ditto's own store on
//! rank 0.

use std::time::{Duration, Instant};

use super::exchange::{self, NoWatch, Watch};
use super::horovod_store::HorovodStore;
use super::records::Keys;
use super::store::Store;
use super::tcpstore::{Handshake, RunningStore, StoreClient, StoreServer};
use super::token::JobToken;
use super::Refusal;
use crate::{LaunchEnv, LaunchError, Result};

/// The key, outside any attempt's prefix, holding the highest restart count a rank of
/// this job has joined with (a count that goes backwards is refused).
pub const RESTART_COUNT_KEY: &str = "ditto/restart_count";

/// This rank's connection to the job's store, for the rendezvous and afterwards (each
/// rank's progress, for naming a rank that stopped).
pub struct Rendezvous {
    store: Box<dyn Store>,
    /// Rank 0's own store (serving until this is dropped).
    hosted: Option<RunningStore>,
    keys: Keys,
    /// Whether the store is torchrun's agent's.
    agent: bool,
    token: JobToken,
    rank: usize,
    world: usize,
    timeout: Duration,
    deadline: Instant,
}

impl std::fmt::Debug for Rendezvous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rendezvous")
            .field("store", &self.store.address())
            .field("hosted", &self.hosted.is_some())
            .field("keys", &self.keys)
            .field("rank", &self.rank)
            .field("world", &self.world)
            .finish_non_exhaustive()
    }
}

impl Rendezvous {
    /// Joins the store `env` describes within `timeout`: torchrun's agent store on
    /// `MASTER_ADDR:MASTER_PORT` as a TCPStore client (checking that the restart count
    /// does not go backwards), else ditto's own store, which rank 0 binds on
    /// `DITTO_RENDEZVOUS_BIND` (default `MASTER_ADDR`) and the others reach through the
    /// job token's handshake.
    pub fn join(env: &LaunchEnv, token: &JobToken, timeout: Duration) -> Result<Rendezvous> {
        let world = env.world_size;
        if env.horovod_store {
            Rendezvous::horovod(&env.master(), token, world, env.rank, timeout)
        } else if env.agent_store {
            Rendezvous::agent(
                &env.master(),
                env.restart_count,
                token,
                world,
                env.rank,
                timeout,
            )
        } else if env.rank == 0 {
            let running = StoreServer::bind((env.rendezvous_bind.as_str(), env.master_port))?
                .start(world, token)?;
            Ok(Rendezvous::hosting(running, token, world, timeout))
        } else {
            Rendezvous::peer(&env.master(), token, world, env.rank, timeout)
        }
    }

    /// Rank 0 of `world`, hosting ditto's own store `running`.
    #[must_use]
    pub fn hosting(
        running: RunningStore,
        token: &JobToken,
        world: usize,
        timeout: Duration,
    ) -> Rendezvous {
        Rendezvous {
            store: Box::new(running.local()),
            hosted: Some(running),
            keys: Keys::own_store(),
            agent: false,
            token: token.clone(),
            rank: 0,
            world,
            timeout,
            deadline: Instant::now() + timeout,
        }
    }

    /// Rank `rank` (not 0) of `world`, joining rank 0's own store at `address` through
    /// the job token's handshake.
    pub fn peer(
        address: &str,
        token: &JobToken,
        world: usize,
        rank: usize,
        timeout: Duration,
    ) -> Result<Rendezvous> {
        Rendezvous::client(address, None, token, (rank, world), timeout)
    }

    /// Rank `rank` of `world`, joining torchrun's agent store at `address` (a plain
    /// TCPStore) for attempt `restart_count`.
    pub fn agent(
        address: &str,
        restart_count: u64,
        token: &JobToken,
        world: usize,
        rank: usize,
        timeout: Duration,
    ) -> Result<Rendezvous> {
        Rendezvous::client(address, Some(restart_count), token, (rank, world), timeout)
    }

    /// Rank `rank` of `world`, joining Horovod's HTTP rendezvous server at `address`
    /// (horovodrun's Gloo mode). Like torchrun's agent store, it outlives the ranks.
    pub fn horovod(
        address: &str,
        token: &JobToken,
        world: usize,
        rank: usize,
        timeout: Duration,
    ) -> Result<Rendezvous> {
        if rank >= world {
            return Err(LaunchError::invalid(
                "Rendezvous::horovod",
                format!("rank {rank}; expected 0..{world}"),
            ));
        }
        Ok(Rendezvous {
            store: Box::new(HorovodStore::new(address, timeout)),
            hosted: None,
            keys: Keys::own_store(),
            agent: true,
            token: token.clone(),
            rank,
            world,
            timeout,
            deadline: Instant::now() + timeout,
        })
    }

    /// A rank that reaches its store at `address` as a client: torchrun's agent store
    /// for attempt `restart_count` when there is one, else rank 0's own store through
    /// the handshake.
    fn client(
        address: &str,
        restart_count: Option<u64>,
        token: &JobToken,
        (rank, world): (usize, usize),
        timeout: Duration,
    ) -> Result<Rendezvous> {
        let deadline = Instant::now() + timeout;
        let (client, keys) = match restart_count {
            Some(count) => {
                if rank >= world {
                    return Err(LaunchError::invalid(
                        "Rendezvous::agent",
                        format!("rank {rank}; expected 0..{world}"),
                    ));
                }
                let mut client = StoreClient::connect(address, None, timeout)?;
                check_restart_count(&mut client, count)?;
                (client, Keys::torchrun(count))
            }
            None => {
                let (world32, rank32) = exchange::peer_claim("Rendezvous::peer", world, rank)?;
                let handshake = Handshake {
                    token,
                    world: world32,
                    rank: rank32,
                };
                let client = StoreClient::connect(address, Some(handshake), timeout)?;
                (client, Keys::own_store())
            }
        };
        Ok(Rendezvous {
            store: Box::new(client),
            hosted: None,
            keys,
            agent: restart_count.is_some(),
            token: token.clone(),
            rank,
            world,
            timeout,
            deadline,
        })
    }

    /// Hands rank 0's `payload` (NCCL's id) to every rank: rank 0 passes it and gets it
    /// back once every rank has it; the others pass `None` and get it. Bounded by the
    /// timeout given to [`join`](Self::join).
    pub fn exchange(&mut self, payload: Option<&[u8]>) -> Result<Vec<u8>> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if self.rank == 0 {
            let payload = payload.ok_or_else(|| {
                LaunchError::invalid("Rendezvous::exchange", "rank 0 must pass the payload")
            })?;
            let watch: &dyn Watch = match &self.hosted {
                Some(running) => running,
                None => &NoWatch,
            };
            exchange::host(
                self.store.as_mut(),
                watch,
                &self.keys,
                &self.token,
                self.world,
                payload,
                left,
                self.hosted.is_some(),
            )?;
            return Ok(payload.to_vec());
        }
        let got = exchange::peer(
            self.store.as_mut(),
            &self.keys,
            &self.token,
            self.world,
            self.rank,
            left,
        );
        match got {
            // ditto's own store lives in rank 0's process.
            Err(LaunchError::StoreClosed { .. }) if !self.uses_agent_store() => {
                Err(LaunchError::PeerExited {
                    op: "rendezvous (rank 0 hosts the store)".into(),
                    ranks: vec![0],
                })
            }
            other => other,
        }
    }

    /// The connections rank 0's own store turned away since the last call (empty on
    /// other ranks and under torchrun), for rank 0 to log.
    pub fn take_refusals(&self) -> Vec<Refusal> {
        self.hosted
            .as_ref()
            .map(RunningStore::take_refusals)
            .unwrap_or_default()
    }

    /// Whether this rank joined a launcher's store, torchrun's agent store or Horovod's
    /// rendezvous server, which outlives the ranks (rather than ditto's own on rank 0).
    #[must_use]
    pub fn uses_agent_store(&self) -> bool {
        self.agent
    }

    /// The store, for keys of this job's own (each rank's progress).
    pub fn store(&mut self) -> &mut dyn Store {
        self.store.as_mut()
    }

    /// Where this rendezvous's keys live.
    #[must_use]
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The timeout given to [`join`](Self::join).
    #[must_use]
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// Refuses a restart count below the highest one a rank of this job joined the store
/// with, and records `mine` when it is the highest. A worker of an earlier attempt that
/// is still alive, or a node that joined with a count of its own, must not read the
/// keys of another attempt.
pub fn check_restart_count(store: &mut dyn Store, mine: u64) -> Result<()> {
    let wanted = mine.to_string().into_bytes();
    let mut seen = Vec::new();
    // Each round either succeeds or learns a higher count; ranks racing to raise it
    // settle within a few rounds.
    for _ in 0..64 {
        let now = store.compare_set(RESTART_COUNT_KEY, &seen, &wanted)?;
        if now == wanted {
            return Ok(());
        }
        let stored = std::str::from_utf8(&now)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| LaunchError::Rendezvous {
                address: store.address().to_string(),
                message: format!(
                    "{RESTART_COUNT_KEY} holds {:?}, not a restart count",
                    String::from_utf8_lossy(&now)
                ),
            })?;
        if stored > mine {
            return Err(LaunchError::Environment {
                name: "TORCHELASTIC_RESTART_COUNT",
                message: format!(
                    "is {mine}, but a rank of this job already joined the store as attempt \
                     {stored}: the restart count went backwards (a worker of an earlier \
                     attempt, or a node that joined with a count of its own; restart the \
                     whole job)"
                ),
            });
        }
        seen = now;
    }
    Err(LaunchError::Rendezvous {
        address: store.address().to_string(),
        message: format!("{RESTART_COUNT_KEY} kept changing; the restart count was not recorded"),
    })
}
