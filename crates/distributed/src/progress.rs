//! Each rank's progress through its collectives, kept in the job's store, so that when a
//! collective times out the survivors can name the rank(s) that never arrived and where
//! they stopped (PyTorch's desync debugging does the same from its store):
//!
//! ```text
//! all_reduce #70 timed out after 15s: rank 1 last entered collective #69 and has shown no sign of life for 1.0s
//! ```
//!
//! The collective path only updates two counters ([`ProgressBoard::entered`],
//! [`ProgressBoard::finished`]); a publisher thread writes them to the store
//! (`BASE/progress/RANK`) whenever they change, and at least every [`HEARTBEAT`], with a
//! beat counter. A store `SET` needs no answer, so publishing never waits on the store,
//! and what a rank killed by SIGKILL had published is already in the kernel's send buffer.
//! On a timeout the survivors read every rank's record twice, [`HEARTBEAT`]s apart: a
//! rank that never entered the collective, or whose beat stopped, is named.
//!
//! The records are plain counters, not sealed: they hold nothing secret, and a client of
//! torchrun's store that forges them can only mislead the diagnosis of a job that has
//! already failed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use launch::rendezvous::Rendezvous;
use launch::LaunchError;

use crate::{DistError, Result, Straggler};

/// How often a rank publishes its record when nothing changes.
pub const HEARTBEAT: Duration = Duration::from_millis(250);
/// How long one store query of the diagnosis may take (the store may be gone or stuck).
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// What this rank has done, as published.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Record {
    /// Collective numbers plus one (0: none yet).
    entered: u64,
    finished: u64,
    beat: u64,
}

impl Record {
    fn to_bytes(self) -> Vec<u8> {
        [self.entered, self.finished, self.beat]
            .iter()
            .flat_map(|n| n.to_le_bytes())
            .collect()
    }

    fn from_bytes(bytes: &[u8]) -> Option<Record> {
        let word = |i: usize| {
            Some(u64::from_le_bytes(
                bytes.get(8 * i..8 * i + 8)?.try_into().ok()?,
            ))
        };
        (bytes.len() == 24).then_some(())?;
        Some(Record {
            entered: word(0)?,
            finished: word(1)?,
            beat: word(2)?,
        })
    }
}

struct Shared {
    local: Mutex<(Record, bool)>,
    changed: Condvar,
    stop: AtomicBool,
    rendezvous: Mutex<Rendezvous>,
    rank: usize,
    world: usize,
}

impl Shared {
    fn local(&self) -> MutexGuard<'_, (Record, bool)> {
        self.local.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn rendezvous(&self) -> MutexGuard<'_, Rendezvous> {
        self.rendezvous.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn key(&self, rank: usize) -> String {
        let base = self.rendezvous().keys().base().to_string();
        format!("{base}/progress/{rank}")
    }
}

/// This rank's progress, published to the job's store; owns the rendezvous (and so, on
/// rank 0 outside torchrun, ditto's own store) for the life of the group.
pub struct ProgressBoard {
    shared: Arc<Shared>,
    publisher: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ProgressBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressBoard")
            .field("rank", &self.shared.rank)
            .field("world", &self.shared.world)
            .finish_non_exhaustive()
    }
}

impl ProgressBoard {
    /// Starts publishing rank `rank`'s progress (of `world`) to the store `rendezvous`
    /// joined, after the rendezvous has formed.
    pub fn start(mut rendezvous: Rendezvous, rank: usize, world: usize) -> Result<ProgressBoard> {
        rendezvous.store().set_timeout(QUERY_TIMEOUT);
        let shared = Arc::new(Shared {
            local: Mutex::new((Record::default(), true)),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            rendezvous: Mutex::new(rendezvous),
            rank,
            world,
        });
        let publishing = Arc::clone(&shared);
        let publisher = std::thread::Builder::new()
            .name("progress-board".into())
            .spawn(move || publish(&publishing))
            .map_err(|source| DistError::Io {
                context: "starting the progress publisher".into(),
                source,
            })?;
        Ok(ProgressBoard {
            shared,
            publisher: Some(publisher),
        })
    }

    /// Collective `sequence` is about to start on this rank.
    pub fn entered(&self, sequence: u64) {
        let mut local = self.shared.local();
        local.0.entered = sequence + 1;
        local.1 = true;
        self.shared.changed.notify_all();
    }

    /// Collective `sequence` ended with `result`: recorded when it succeeded; a
    /// [`DistError::CollectiveTimeout`] of it becomes [`DistError::CollectiveTimeoutNamed`]
    /// when the store names the rank(s) that did not arrive.
    pub fn finished<T>(&self, sequence: u64, result: Result<T>) -> Result<T> {
        match result {
            Ok(value) => {
                let mut local = self.shared.local();
                local.0.finished = sequence + 1;
                local.1 = true;
                self.shared.changed.notify_all();
                Ok(value)
            }
            Err(DistError::CollectiveTimeout {
                op,
                sequence: timed_out,
                timeout,
                missing,
            }) => match self.stragglers(timed_out) {
                Some(stragglers) if !stragglers.is_empty() => {
                    Err(DistError::CollectiveTimeoutNamed {
                        op,
                        sequence: timed_out,
                        timeout,
                        stragglers,
                    })
                }
                _ => Err(DistError::CollectiveTimeout {
                    op,
                    sequence: timed_out,
                    timeout,
                    missing,
                }),
            },
            Err(other) => Err(other),
        }
    }

    /// The other ranks that did not arrive at collective `sequence`: each rank's record
    /// is read twice, two [`HEARTBEAT`]s apart; a rank that never entered `sequence`, or
    /// whose record stopped changing, is named. `None` when the store cannot be read
    /// (outside torchrun, a store that is gone means rank 0, its host, is gone).
    pub fn stragglers(&self, sequence: u64) -> Option<Vec<Straggler>> {
        let first = self.read_all();
        let first_read = Instant::now();
        std::thread::sleep(2 * HEARTBEAT);
        let second = self.read_all();
        let silent_for = first_read.elapsed();
        let (first, second) = match (first, second) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(LaunchError::StoreClosed { .. }), _)
            | (_, Err(LaunchError::StoreClosed { .. }))
                if self.shared.rank != 0 && !self.shared.rendezvous().uses_agent_store() =>
            {
                return Some(vec![Straggler {
                    rank: 0,
                    last_entered: None,
                    silent_for: Some(silent_for),
                }]);
            }
            _ => return None,
        };
        let stragglers = (0..self.shared.world)
            .filter(|&r| r != self.shared.rank)
            .filter_map(|r| {
                let (before, now) = (first[r], second[r]);
                let last_entered = now.and_then(|n| n.entered.checked_sub(1));
                let silent = before.map(|b| b.beat) == now.map(|n| n.beat);
                let never_arrived = last_entered.is_none_or(|n| n < sequence);
                (silent || never_arrived).then(|| Straggler {
                    rank: r,
                    last_entered,
                    silent_for: silent.then_some(silent_for),
                })
            })
            .collect();
        Some(stragglers)
    }

    /// Every rank's record (`None` where none is published).
    fn read_all(&self) -> launch::Result<Vec<Option<Record>>> {
        let keys: Vec<String> = (0..self.shared.world).map(|r| self.shared.key(r)).collect();
        let mut rendezvous = self.shared.rendezvous();
        let store = rendezvous.store();
        keys.iter()
            .map(|key| {
                if !store.check(&[key])? {
                    return Ok(None);
                }
                Ok(store
                    .get(key, QUERY_TIMEOUT)?
                    .as_deref()
                    .and_then(Record::from_bytes))
            })
            .collect()
    }
}

impl Drop for ProgressBoard {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.changed.notify_all();
        if let Some(publisher) = self.publisher.take() {
            let _ = publisher.join();
        }
    }
}

/// The publisher thread: writes this rank's record whenever it changes, and every
/// [`HEARTBEAT`] with the next beat; when the board is dropped, a last time (the beat
/// then stops, as a dead rank's does). Best effort: a store that is gone ends it quietly
/// (the diagnosis says so if it is ever needed).
fn publish(shared: &Shared) {
    let key = shared.key(shared.rank);
    let mut last_beat = Instant::now() - HEARTBEAT;
    loop {
        let record = {
            let mut local = shared.local();
            while !local.1 && !shared.stop.load(Ordering::Relaxed) {
                let wait = HEARTBEAT.saturating_sub(last_beat.elapsed());
                if wait.is_zero() {
                    break;
                }
                local = shared
                    .changed
                    .wait_timeout(local, wait)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            let stopping = shared.stop.load(Ordering::Relaxed);
            if stopping && !local.1 {
                return;
            }
            local.1 = false;
            if last_beat.elapsed() >= HEARTBEAT {
                local.0.beat += 1;
                last_beat = Instant::now();
            }
            local.0
        };
        if shared
            .rendezvous()
            .store()
            .set(&key, &record.to_bytes())
            .is_err()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_stragglers_read_as_the_issue_shows() {
        let r = Record {
            entered: 70,
            finished: 69,
            beat: 12,
        };
        assert_eq!(Record::from_bytes(&r.to_bytes()), Some(r));
        assert_eq!(Record::from_bytes(&[0; 23]), None);
        let dead = Straggler {
            rank: 1,
            last_entered: Some(69),
            silent_for: Some(Duration::from_millis(1000)),
        };
        assert_eq!(
            dead.to_string(),
            "rank 1 last entered collective #69 and has shown no sign of life for 1.0s"
        );
        let elsewhere = Straggler {
            rank: 2,
            last_entered: None,
            silent_for: None,
        };
        assert_eq!(
            elsewhere.to_string(),
            "rank 2 entered no collective (it is alive)"
        );
    }
}
