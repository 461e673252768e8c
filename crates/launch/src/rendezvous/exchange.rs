//! The rendezvous itself, over any [`Store`]: every peer writes a check-in MAC'd with
//! the job token; rank 0 waits for all of them, checks each, and writes each peer a
//! sealed verdict (the payload, or why the job cannot form) bound to that peer's
//! check-in. The same steps run on torchrun's agent store and on ditto's own.

use std::time::{Duration, Instant};

use super::records::{CheckIn, Keys, Verdict, MAX_PAYLOAD};
use super::store::Store;
use super::tcpstore::RunningStore;
use super::token::{nonce, JobToken};
use crate::{LaunchError, Result};

/// How long peers wait beyond the timeout for rank 0's verdict (which names the missing
/// ranks), before concluding rank 0 itself is gone.
pub const VERDICT_GRACE: Duration = Duration::from_secs(2);
/// How long rank 0 waits, after a failed rendezvous on its own store, for the peers to
/// read their verdicts before it returns (and its process, and the store, may end).
const VERDICT_DRAIN: Duration = Duration::from_secs(2);
/// How long one wait for a check-in lasts before rank 0 looks at its peers again.
const LOOK_AGAIN: Duration = Duration::from_millis(100);

/// What rank 0 learns about its peers from the store's connections: only ditto's own
/// store knows (torchrun's agent watches its workers itself).
pub trait Watch {
    /// Ranks that checked in and whose connection closed.
    fn departed(&self) -> Vec<usize> {
        Vec::new()
    }
    /// Why the job cannot form as launched, when a rank said so at the handshake.
    fn trouble(&self) -> Option<String> {
        None
    }
    /// Waits (until `deadline`) for `ranks` to have read their verdicts.
    fn drain(&self, _ranks: &[usize], _deadline: Instant) {}
}

/// Nothing to watch (torchrun's store).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoWatch;

impl Watch for NoWatch {}

impl Watch for RunningStore {
    fn departed(&self) -> Vec<usize> {
        RunningStore::departed(self)
    }
    fn trouble(&self) -> Option<String> {
        RunningStore::trouble(self)
    }
    fn drain(&self, ranks: &[usize], deadline: Instant) {
        RunningStore::drain(self, ranks, deadline);
    }
}

/// Rank 0's side: waits up to `timeout` for ranks `1..world` to check in under `keys`,
/// then writes each of them a verdict: `payload` when all are in and prove `token`;
/// otherwise why not, and that is this function's error too. With
/// `wait_for_receipts` (rank 0 hosts the store, which ends with its process), it
/// returns only once every peer has read its verdict or left.
#[allow(clippy::too_many_arguments)]
pub fn host(
    store: &mut dyn Store,
    watch: &dyn Watch,
    keys: &Keys,
    token: &JobToken,
    world: usize,
    payload: &[u8],
    timeout: Duration,
    wait_for_receipts: bool,
) -> Result<()> {
    if payload.len() > MAX_PAYLOAD {
        return Err(LaunchError::invalid(
            "rendezvous",
            format!("a payload of {} bytes exceeds {MAX_PAYLOAD}", payload.len()),
        ));
    }
    let deadline = Instant::now() + timeout;
    let own = nonce()?;
    let mut peers: Vec<Option<CheckIn>> = vec![None; world];
    let address = store.address().to_string();
    let fail = |store: &mut dyn Store,
                peers: &[Option<CheckIn>],
                verdict: Verdict,
                error: LaunchError|
     -> Result<()> {
        let told: Vec<usize> = (1..world).filter(|&r| peers[r].is_some()).collect();
        for &r in &told {
            let peer = peers[r].as_ref().expect("told ranks checked in");
            // A peer that cannot be told will time out on its own.
            if let Ok(record) = verdict.seal(token, peer, &own) {
                let _ = store.set(&keys.verdict(r), &record);
            }
        }
        watch.drain(&told, Instant::now() + VERDICT_DRAIN);
        Err(error)
    };
    loop {
        if let Some(why) = watch.trouble() {
            let error = LaunchError::Rendezvous {
                address: address.clone(),
                message: why.clone(),
            };
            return fail(store, &peers, Verdict::Refused(why), error);
        }
        let gone: Vec<usize> = watch
            .departed()
            .into_iter()
            .filter(|&r| r > 0 && r < world)
            .collect();
        if !gone.is_empty() {
            let error = LaunchError::PeerExited {
                op: "rendezvous".into(),
                ranks: gone.clone(),
            };
            return fail(store, &peers, Verdict::PeerExited(gone), error);
        }
        let Some(next) = (1..world).find(|&r| peers[r].is_none()) else {
            let go = Verdict::Go(payload.to_vec());
            for (r, peer) in peers.iter().enumerate().skip(1) {
                let peer = peer.as_ref().expect("every peer checked in");
                store.set(&keys.verdict(r), &go.seal(token, peer, &own)?)?;
            }
            if wait_for_receipts {
                await_receipts(
                    store,
                    watch,
                    keys,
                    world,
                    deadline.max(Instant::now() + VERDICT_GRACE),
                )?;
            }
            return Ok(());
        };
        let left = deadline.saturating_duration_since(Instant::now());
        // Wait for the lowest rank still missing; when it does not come within a short
        // while (or time is up), look for every other rank that came meanwhile.
        let arrived =
            !left.is_zero() && store.wait(&[&keys.check_in(next)], left.min(LOOK_AGAIN))?;
        let candidates: Vec<usize> = if arrived {
            vec![next]
        } else {
            (1..world).filter(|&r| peers[r].is_none()).collect()
        };
        for r in candidates {
            if !arrived && !store.check(&[&keys.check_in(r)])? {
                continue;
            }
            let record = store
                .get(&keys.check_in(r), Duration::ZERO)?
                .ok_or_else(|| LaunchError::Rendezvous {
                    address: address.clone(),
                    message: format!("rank {r}'s check-in vanished from the store"),
                })?;
            let why = match CheckIn::from_record(&record, token) {
                Ok(c) if c.rank as usize != r => {
                    format!("the check-in under rank {r}'s key claims rank {}", c.rank)
                }
                Ok(c) if c.world as usize != world => format!(
                    "rank {r} was launched for world size {}, rank 0 for {world}",
                    c.world
                ),
                Ok(c) => {
                    peers[r] = Some(c);
                    continue;
                }
                Err(why) => format!("rank {r}'s check-in {why}"),
            };
            let error = LaunchError::Rendezvous {
                address: address.clone(),
                message: why.clone(),
            };
            return fail(store, &peers, Verdict::Refused(why), error);
        }
        if left.is_zero() {
            let missing: Vec<usize> = (1..world).filter(|&r| peers[r].is_none()).collect();
            if missing.is_empty() {
                continue; // the last ranks came just in time
            }
            let error = LaunchError::Timeout {
                op: "rendezvous".into(),
                timeout,
                missing: missing.clone(),
            };
            return fail(store, &peers, Verdict::TimedOut(missing), error);
        }
    }
}

/// Waits until every peer has written its receipt (it read its verdict) or left, or
/// `deadline`. A peer that does not confirm in time fails on its own side.
fn await_receipts(
    store: &mut dyn Store,
    watch: &dyn Watch,
    keys: &Keys,
    world: usize,
    deadline: Instant,
) -> Result<()> {
    for r in 1..world {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || watch.departed().contains(&r) {
                break;
            }
            if store.wait(&[&keys.receipt(r)], left.min(LOOK_AGAIN))? {
                break;
            }
        }
    }
    Ok(())
}

/// `world` and `rank` as the wire's u32s, for a rank that checks in with rank 0
/// (`1..world`); a typed error for `op` otherwise.
pub(crate) fn peer_claim(op: &'static str, world: usize, rank: usize) -> Result<(u32, u32)> {
    let (Ok(world32), Ok(rank32)) = (u32::try_from(world), u32::try_from(rank)) else {
        return Err(LaunchError::invalid(
            op,
            format!("world size {world} does not fit the wire format's u32"),
        ));
    };
    if rank == 0 || rank >= world {
        return Err(LaunchError::invalid(
            op,
            format!("rank {rank}; expected 1..{world} (rank 0 hosts the rendezvous)"),
        ));
    }
    Ok((world32, rank32))
}

/// A non-zero rank's side: checks in as `rank` of `world` under `keys` and waits up to
/// `timeout` (plus [`VERDICT_GRACE`]) for rank 0's verdict; returns the payload.
pub fn peer(
    store: &mut dyn Store,
    keys: &Keys,
    token: &JobToken,
    world: usize,
    rank: usize,
    timeout: Duration,
) -> Result<Vec<u8>> {
    let (world32, rank32) = peer_claim("rendezvous", world, rank)?;
    let check_in = CheckIn {
        world: world32,
        rank: rank32,
        nonce: nonce()?,
    };
    store.set(&keys.check_in(rank), &check_in.to_record(token))?;
    let record = store
        .get(&keys.verdict(rank), timeout + VERDICT_GRACE)?
        .ok_or_else(|| LaunchError::Timeout {
            op: "rendezvous: waiting for rank 0's verdict".into(),
            timeout,
            missing: vec![0],
        })?;
    let address = store.address().to_string();
    match Verdict::open(&record, token, &check_in) {
        Ok(Verdict::Go(payload)) => {
            store.set(&keys.receipt(rank), b"")?;
            Ok(payload)
        }
        Ok(Verdict::TimedOut(missing)) => Err(LaunchError::Timeout {
            op: "rendezvous".into(),
            timeout,
            missing,
        }),
        Ok(Verdict::PeerExited(ranks)) => Err(LaunchError::PeerExited {
            op: "rendezvous".into(),
            ranks,
        }),
        Ok(Verdict::Refused(message)) => Err(LaunchError::Rendezvous { address, message }),
        Err(message) => Err(LaunchError::Rendezvous { address, message }),
    }
}
