//! The NCCL backend's watchdog: a thread per communicator that aborts it when a
//! collective runs past the collective timeout, so that a dead or stuck rank cannot
//! leave the others spinning in NCCL forever (PyTorch's `ProcessGroupNCCL` watchdog
//! with `TORCH_NCCL_ASYNC_ERROR_HANDLING`, in its simplest form).
//!
//! The calling thread tells the watchdog when a collective begins and ends. If the end
//! does not come within the timeout, the watchdog calls `ncclCommAbort`, which makes the
//! NCCL call or the kernels the calling thread waits for return; the calling thread then
//! reports [`DistError::CollectiveTimeout`] naming the collective and its sequence
//! number (NCCL does not say which peer it was waiting for), and every later call
//! reports [`DistError::Broken`]. The communicator handle lives here, under the same
//! lock as the abort, so it is aborted exactly once (by the watchdog, or on drop).

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::nccl::{result, sys};

use crate::{DistError, Result};

/// An NCCL communicator handle.
#[derive(Clone, Copy)]
pub(super) struct CommHandle(pub(super) sys::ncclComm_t);

// SAFETY: an NCCL communicator may be used from any thread; `NcclGroup` serializes the
// calls that use it, and only the abort (which NCCL allows from another thread, to end
// a blocked operation) runs on the watchdog's.
unsafe impl Send for CommHandle {}

/// The collective under way.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    op: &'static str,
    sequence: u64,
    started: Instant,
}

struct State {
    /// `None` once aborted.
    comm: Option<CommHandle>,
    current: Option<InFlight>,
    /// The collective the watchdog aborted, with the limit that expired.
    aborted: Option<(InFlight, Duration)>,
    timeout: Duration,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Owns a communicator and the thread that watches its collectives.
pub(super) struct Watchdog {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Starts watching `comm` (which it now owns) with `timeout` per collective.
    pub(super) fn start(comm: CommHandle, timeout: Duration) -> Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                comm: Some(comm),
                current: None,
                aborted: None,
                timeout,
                stop: false,
            }),
            changed: Condvar::new(),
        });
        let watched = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("nccl-watchdog".into())
            .spawn(move || watch(&watched))
            .map_err(|source| DistError::Io {
                context: "NCCL: starting the watchdog thread".into(),
                source,
            });
        let thread = match thread {
            Ok(thread) => thread,
            Err(e) => {
                // The communicator must not leak unaborted.
                abort(&mut shared.lock());
                return Err(e);
            }
        };
        Ok(Watchdog {
            shared,
            thread: Some(thread),
        })
    }

    /// Sets the limit (the watchdog applies it to the collective under way, too).
    pub(super) fn set_timeout(&self, timeout: Duration) {
        self.shared.lock().timeout = timeout;
    }

    /// Marks collective `sequence` (`op`) as begun and returns the communicator to run
    /// it on; [`DistError::Broken`] once the watchdog has aborted an earlier one.
    pub(super) fn begin(&self, op: &'static str, sequence: u64) -> Result<CommHandle> {
        let mut state = self.shared.lock();
        if let Some((aborted, timeout)) = state.aborted {
            return Err(DistError::Broken {
                reason: timed_out(aborted, timeout).to_string(),
            });
        }
        let comm = state.comm.ok_or_else(|| DistError::Broken {
            reason: "the NCCL communicator was aborted".into(),
        })?;
        state.current = Some(InFlight {
            op,
            sequence,
            started: Instant::now(),
        });
        self.shared.changed.notify_all();
        Ok(comm)
    }

    /// Runs `enqueue` on the communicator under the watchdog's lock: for NCCL calls that
    /// only record work and never block (`ncclSend` / `ncclRecv` inside a group), so an
    /// abort cannot free the communicator while they use it.
    pub(super) fn enqueue<T>(&self, enqueue: impl FnOnce(CommHandle) -> Result<T>) -> Result<T> {
        let state = self.shared.lock();
        let comm = state.comm.ok_or_else(|| DistError::Broken {
            reason: "the NCCL communicator was aborted".into(),
        })?;
        enqueue(comm)
    }

    /// Marks collective `sequence` as ended, with the calling thread's `outcome`; when
    /// the watchdog aborted it, the outcome (whatever NCCL made of the abort) is
    /// replaced by [`DistError::CollectiveTimeout`].
    pub(super) fn end<T>(&self, sequence: u64, outcome: Result<T>) -> Result<T> {
        let mut state = self.shared.lock();
        state.current = None;
        match state.aborted {
            Some((aborted, timeout)) if aborted.sequence == sequence => {
                Err(timed_out(aborted, timeout))
            }
            _ => outcome,
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        {
            let mut state = self.shared.lock();
            state.stop = true;
            // Abort, not destroy: destroy waits for peers, which may be gone.
            abort(&mut state);
        }
        self.shared.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn timed_out(aborted: InFlight, timeout: Duration) -> DistError {
    DistError::CollectiveTimeout {
        op: aborted.op,
        sequence: aborted.sequence,
        timeout,
        missing: None,
    }
}

/// Aborts the communicator, once.
fn abort(state: &mut State) {
    if let Some(comm) = state.comm.take() {
        // SAFETY: the handle came from ncclCommInitRank and is taken out of the state,
        // so it is aborted exactly once.
        let _ = unsafe { result::comm_abort(comm.0) };
    }
}

/// The watchdog thread: sleeps until the collective under way is due, and aborts the
/// communicator if it has not ended by then.
fn watch(shared: &Shared) {
    let mut state = shared.lock();
    loop {
        if state.stop {
            return;
        }
        let wait = match state.current {
            None => None,
            Some(current) => {
                let due = current.started + state.timeout;
                let now = Instant::now();
                if now >= due {
                    state.aborted = Some((current, state.timeout));
                    state.current = None;
                    abort(&mut state);
                    continue;
                }
                Some(due - now)
            }
        };
        state = match wait {
            None => shared
                .changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner()),
            Some(wait) => {
                shared
                    .changed
                    .wait_timeout(state, wait)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
        };
    }
}
