//! The state ditto's store shares between its accept loop, its handshake and session
//! threads and rank 0's in-process handle: the key-value map, which rank holds which
//! session, the handshakes under way per source, and what was refused.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::kv::Kv;
use super::wire::wire_key;
use crate::rendezvous::store::Store;
use crate::rendezvous::Refusal;
use crate::{LaunchError, Result};

/// A rank's place in the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RankSlot {
    /// No proven session yet.
    Empty,
    /// A proven session is open.
    Live(SocketAddr),
    /// Its session closed (the rank exited, or sent what the store does not accept).
    Gone(SocketAddr),
}

/// A handshake under way: which connection, from where, and a handle to end it early.
#[derive(Debug)]
pub(crate) struct Handshaking {
    pub(crate) id: u64,
    pub(crate) source: IpAddr,
    pub(crate) stream: TcpStream,
}

#[derive(Debug)]
pub(crate) struct HubState {
    pub(crate) kv: Kv,
    /// Indexed by rank; rank 0 is the store's own process and never has a session.
    pub(crate) ranks: Vec<RankSlot>,
    /// Handshakes under way and not evicted, oldest first.
    pub(crate) handshakes: VecDeque<Handshaking>,
    /// Handshake threads alive, evicted ones included.
    pub(crate) handshake_threads: usize,
    /// Connections turned away, for rank 0 to log.
    pub(crate) refusals: Vec<Refusal>,
    /// A proven rank launched wrong (another world size): the job cannot form.
    pub(crate) trouble: Option<String>,
    /// Set when the store shuts down.
    pub(crate) stop: bool,
    /// Every open connection, to shut down on stop (blocked reads then return).
    pub(crate) open: HashMap<u64, TcpStream>,
    pub(crate) next_id: u64,
}

#[derive(Debug)]
pub(crate) struct Hub {
    state: Mutex<HubState>,
    /// Notified on every change of the map or of a rank's slot, and on stop.
    pub(crate) changed: Condvar,
}

impl Hub {
    pub(crate) fn new(world: usize) -> Hub {
        Hub {
            state: Mutex::new(HubState {
                kv: Kv::default(),
                ranks: vec![RankSlot::Empty; world],
                handshakes: VecDeque::new(),
                handshake_threads: 0,
                refusals: Vec::new(),
                trouble: None,
                stop: false,
                open: HashMap::new(),
                next_id: 0,
            }),
            changed: Condvar::new(),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits on [`changed`](Self::changed) for at most `wait`.
    pub(crate) fn wait_change<'a>(
        &self,
        state: MutexGuard<'a, HubState>,
        wait: Duration,
    ) -> MutexGuard<'a, HubState> {
        self.changed
            .wait_timeout(state, wait)
            .unwrap_or_else(|p| p.into_inner())
            .0
    }

    /// Registers an open connection for shutdown on stop; its id.
    pub(crate) fn track(&self, stream: &TcpStream) -> Option<u64> {
        let clone = stream.try_clone().ok()?;
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.open.insert(id, clone);
        Some(id)
    }

    pub(crate) fn untrack(&self, id: Option<u64>) {
        if let Some(id) = id {
            self.lock().open.remove(&id);
        }
    }
}

/// Rank 0's handle on its own store: the same map the sessions serve, without a socket.
#[derive(Debug, Clone)]
pub struct LocalStore {
    pub(crate) hub: Arc<Hub>,
    pub(crate) address: String,
}

impl LocalStore {
    fn failed(&self, message: String) -> LaunchError {
        LaunchError::Rendezvous {
            address: self.address.clone(),
            message,
        }
    }

    /// Waits until `ready` holds of the map, or `timeout` passes; whether it held.
    fn wait_for(&self, timeout: Duration, ready: impl Fn(&HubState) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.hub.lock();
        loop {
            if ready(&state) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || state.stop {
                return false;
            }
            state = self.hub.wait_change(state, left);
        }
    }
}

impl Store for LocalStore {
    fn address(&self) -> &str {
        &self.address
    }

    fn set(&mut self, key: &str, value: &[u8]) -> Result<()> {
        self.hub
            .lock()
            .kv
            .set(&wire_key(key), value.to_vec())
            .map_err(|m| self.failed(m))?;
        self.hub.changed.notify_all();
        Ok(())
    }

    fn get(&mut self, key: &str, timeout: Duration) -> Result<Option<Vec<u8>>> {
        let key = wire_key(key);
        if !self.wait_for(timeout, |s| s.kv.get(&key).is_some()) {
            return Ok(None);
        }
        Ok(self.hub.lock().kv.get(&key).cloned())
    }

    fn add(&mut self, key: &str, delta: i64) -> Result<i64> {
        let sum = self
            .hub
            .lock()
            .kv
            .add(&wire_key(key), delta)
            .map_err(|m| self.failed(m))?;
        self.hub.changed.notify_all();
        Ok(sum)
    }

    fn check(&mut self, keys: &[&str]) -> Result<bool> {
        let keys: Vec<Vec<u8>> = keys.iter().map(|k| wire_key(k)).collect();
        Ok(self.hub.lock().kv.all_present(&keys))
    }

    fn wait(&mut self, keys: &[&str], timeout: Duration) -> Result<bool> {
        let keys: Vec<Vec<u8>> = keys.iter().map(|k| wire_key(k)).collect();
        Ok(self.wait_for(timeout, |s| s.kv.all_present(&keys)))
    }

    fn compare_set(&mut self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        let now = self
            .hub
            .lock()
            .kv
            .compare_set(&wire_key(key), expected.to_vec(), desired.to_vec())
            .map_err(|m| self.failed(m))?;
        self.hub.changed.notify_all();
        Ok(now)
    }

    fn delete_key(&mut self, key: &str) -> Result<bool> {
        Ok(self.hub.lock().kv.delete(&wire_key(key)))
    }
}
