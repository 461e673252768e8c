//! The NCCL backend's watchdog: a thread per communicator that aborts it when a
//! collective runs past the collective timeout, so that a dead or stuck rank cannot
//! leave the others spinning in NCCL forever (PyTorch's `ProcessGroupNCCL` watchdog
//! with `TORCH_NCCL_ASYNC_ERROR_HANDLING`).
//!
//! A collective is enqueued on the stream and its call returns; the stream runs it
//! later. So the watchdog cannot learn from the host when a collective starts or ends:
//! the calling thread records a CUDA event just before it ([`Watched::start`]) and one
//! just after ([`Watched::end`]), and the watchdog polls them. The clock of a collective
//! starts when its start event completes, i.e. when the stream reaches it, so compute
//! queued before it (a long step) does not count against its limit.
//!
//! NCCL forbids using one communicator from two threads at once, and `ncclCommAbort`
//! frees it. So the abort never overlaps a call: the calling thread marks itself inside
//! NCCL ([`Watchdog::enter`] / [`Watchdog::leave`]) under the same lock the abort takes.
//! A collective found overdue while no thread is inside NCCL is aborted by the watchdog
//! (the calling thread is computing or waiting on the stream, which the abort
//! releases); one found overdue while the calling thread is inside an NCCL call is
//! aborted by that thread when the call returns. The communicator handle lives here,
//! taken out by the abort, so it is aborted exactly once.
//!
//! The first call after an abort reports [`DistError::CollectiveTimeout`] naming the
//! collective and its sequence number (NCCL does not say which peer it was waiting
//! for), so the output of the timed-out collective, which the stream went on to use,
//! never reaches the program unreported; later calls report [`DistError::Broken`].

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaEvent, CudaStream};
use cudarc::nccl::{result, sys};

use crate::{DistError, Result};

/// An NCCL communicator handle.
#[derive(Clone, Copy)]
pub(super) struct CommHandle(pub(super) sys::ncclComm_t);

// SAFETY: an NCCL communicator may be used from any thread, one at a time; the
// watchdog's lock makes the calls (`inside`) and the abort exclusive.
unsafe impl Send for CommHandle {}

/// How often the watchdog looks at the events of collectives in flight: often enough
/// that a timeout is reported within a few percent of a one-second limit, rarely enough
/// to cost nothing next to a collective.
const POLL: Duration = Duration::from_millis(10);

/// A collective named for its error.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    op: &'static str,
    sequence: u64,
}

/// A collective enqueued on the stream and not yet seen complete.
struct Watched {
    what: InFlight,
    /// Recorded just before the collective: its completion starts the clock.
    start: CudaEvent,
    /// Recorded just after it; `None` while the calling thread is still issuing it.
    end: Option<CudaEvent>,
    /// When the watchdog first saw `start` complete.
    started: Option<Instant>,
}

struct State {
    /// `None` once aborted.
    comm: Option<CommHandle>,
    /// In issue order (the stream runs them in that order).
    pending: VecDeque<Watched>,
    /// True while the calling thread is inside an NCCL call.
    inside: bool,
    /// Found overdue while a thread was inside NCCL: that thread aborts on leaving.
    overdue: Option<(InFlight, Duration)>,
    /// The collective that was aborted, with the limit that expired.
    aborted: Option<(InFlight, Duration)>,
    /// Whether [`DistError::CollectiveTimeout`] was returned once already.
    reported: bool,
    /// Events of completed collectives, reused (no driver allocation per collective).
    spare: Vec<CudaEvent>,
    timeout: Duration,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    context: Arc<CudaContext>,
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
    /// Starts watching `comm` (which it now owns), whose collectives run on a stream of
    /// `context`, with `timeout` per collective.
    pub(super) fn start(
        comm: CommHandle,
        context: Arc<CudaContext>,
        timeout: Duration,
    ) -> Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                comm: Some(comm),
                pending: VecDeque::new(),
                inside: false,
                overdue: None,
                aborted: None,
                reported: false,
                spare: Vec::new(),
                timeout,
                stop: false,
            }),
            changed: Condvar::new(),
            context,
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

    /// Sets the limit (the watchdog applies it to the collectives in flight, too).
    pub(super) fn set_timeout(&self, timeout: Duration) {
        self.shared.lock().timeout = timeout;
    }

    /// The error of a communicator the watchdog aborted: the timeout the first time,
    /// [`DistError::Broken`] after.
    fn after_abort(state: &mut State) -> Option<DistError> {
        let (aborted, timeout) = state.aborted?;
        if state.reported {
            return Some(DistError::Broken {
                reason: timed_out(aborted, timeout).to_string(),
            });
        }
        state.reported = true;
        Some(timed_out(aborted, timeout))
    }

    /// [`DistError::CollectiveTimeout`] (once, then [`DistError::Broken`]) when a
    /// collective already returned was aborted since: what a caller checks after reading
    /// on the host a value computed from collectives' outputs.
    pub(super) fn check(&self) -> Result<()> {
        match Self::after_abort(&mut self.shared.lock()) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Whether the watchdog found collective `sequence` overdue while the calling thread
    /// is inside NCCL (it then aborts the communicator on [`leave`](Self::leave)).
    pub(super) fn is_overdue(&self, sequence: u64) -> bool {
        self.shared
            .lock()
            .overdue
            .is_some_and(|(c, _)| c.sequence == sequence)
    }

    /// Collective `sequence` (`op`) is about to be issued: records its start event on
    /// `stream` and marks the calling thread inside NCCL. Returns the communicator to
    /// issue it on; the timeout of an earlier collective, or [`DistError::Broken`].
    pub(super) fn enter(
        &self,
        op: &'static str,
        sequence: u64,
        stream: &CudaStream,
    ) -> Result<CommHandle> {
        let mut state = self.shared.lock();
        if let Some(error) = Self::after_abort(&mut state) {
            return Err(error);
        }
        let comm = state.comm.ok_or_else(|| DistError::Broken {
            reason: "the NCCL communicator was aborted".into(),
        })?;
        let start = event(&mut state, &self.shared.context, op)?;
        start.record(stream).map_err(|e| cuda_error(op, &e))?;
        state.pending.push_back(Watched {
            what: InFlight { op, sequence },
            start,
            end: None,
            started: None,
        });
        state.inside = true;
        self.shared.changed.notify_all();
        Ok(comm)
    }

    /// The calling thread left NCCL after issuing collective `sequence`, with `outcome`:
    /// records its end event (on success) and hands it to the watchdog; aborts the
    /// communicator itself when the watchdog found it overdue meanwhile.
    pub(super) fn leave<T>(
        &self,
        sequence: u64,
        stream: &CudaStream,
        outcome: Result<T>,
    ) -> Result<T> {
        let mut state = self.shared.lock();
        state.inside = false;
        let outcome = outcome.and_then(|value| {
            let op = state.pending.back().map_or("collective", |w| w.what.op);
            let end = event(&mut state, &self.shared.context, op)?;
            end.record(stream).map_err(|e| cuda_error(op, &e))?;
            if let Some(last) = state.pending.back_mut() {
                if last.what.sequence == sequence {
                    last.end = Some(end);
                }
            }
            Ok(value)
        });
        if outcome.is_err() {
            // Nothing of it runs on the stream that the watchdog could wait for.
            if state
                .pending
                .back()
                .is_some_and(|w| w.what.sequence == sequence && w.end.is_none())
            {
                state.pending.pop_back();
            }
        }
        if let Some(overdue) = state.overdue.take() {
            // This thread owns the communicator now that it left NCCL: it aborts.
            state.aborted = Some(overdue);
            abort(&mut state);
        }
        self.shared.changed.notify_all();
        // Its own abort replaces whatever NCCL made of it; an earlier collective's is
        // reported by the next call.
        if state.aborted.is_some_and(|(a, _)| a.sequence == sequence) {
            if let Some(error) = Self::after_abort(&mut state) {
                return Err(error);
            }
        }
        outcome
    }

    /// Waits until every collective issued so far completed on the stream (polled by
    /// the watchdog, so this thread makes no CUDA call), or one of them timed out.
    pub(super) fn wait_all(&self) -> Result<()> {
        let mut state = self.shared.lock();
        loop {
            if let Some(error) = Self::after_abort(&mut state) {
                return Err(error);
            }
            if state.comm.is_none() || state.pending.is_empty() {
                return Ok(());
            }
            state = self
                .shared
                .changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        {
            let mut state = self.shared.lock();
            // Collectives still on the stream complete first (or time out): the
            // program may read their outputs after dropping the group.
            while state.comm.is_some() && !state.pending.is_empty() {
                state = self
                    .shared
                    .changed
                    .wait(state)
                    .unwrap_or_else(|p| p.into_inner());
            }
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

fn cuda_error(op: &'static str, e: &cudarc::driver::DriverError) -> DistError {
    DistError::Nccl {
        op,
        message: format!("recording the collective's event: {e}"),
    }
}

/// A spare event, or a new one.
fn event(state: &mut State, context: &Arc<CudaContext>, op: &'static str) -> Result<CudaEvent> {
    match state.spare.pop() {
        Some(event) => Ok(event),
        None => context.new_event(None).map_err(|e| cuda_error(op, &e)),
    }
}

/// Aborts the communicator, once.
fn abort(state: &mut State) {
    if let Some(comm) = state.comm.take() {
        // SAFETY: the handle came from ncclCommInitRank and is taken out of the state,
        // so it is aborted exactly once; no thread is inside NCCL (`inside` is false
        // under the lock the caller holds).
        let _ = unsafe { result::comm_abort(comm.0) };
    }
    // Their events never complete now; they are destroyed, not reused.
    state.pending.clear();
}

/// Whether `event` completed; an error (a broken context) counts as not yet, so the
/// collective's timeout ends the wait.
fn done(event: &CudaEvent) -> bool {
    event.try_is_complete().unwrap_or(false)
}

/// The watchdog thread: polls the events of the collectives in flight, retires the
/// completed ones and aborts the communicator when one is overdue.
fn watch(shared: &Shared) {
    // Event queries need no current context on a GPU, but the stand-in and some
    // drivers expect one on the calling thread.
    let _ = shared.context.bind_to_thread();
    let mut state = shared.lock();
    loop {
        if state.stop {
            return;
        }
        let now = Instant::now();
        let timeout = state.timeout;
        let mut retired = false;
        while let Some(front) = state.pending.front_mut() {
            if front.started.is_none() && done(&front.start) {
                front.started = Some(now);
            }
            if front.end.as_ref().is_some_and(done) {
                let Watched { start, end, .. } = state.pending.pop_front().expect("front");
                state.spare.push(start);
                state.spare.extend(end);
                retired = true;
                continue;
            }
            break;
        }
        if retired {
            shared.changed.notify_all();
        }
        let overdue = state.pending.front().and_then(|front| {
            let started = front.started?;
            (now >= started + timeout).then_some(front.what)
        });
        if let Some(what) = overdue {
            if state.inside {
                state.overdue.get_or_insert((what, timeout));
            } else if state.comm.is_some() {
                state.aborted = Some((what, timeout));
                abort(&mut state);
                shared.changed.notify_all();
            }
        }
        state = if state.pending.is_empty() {
            shared
                .changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner())
        } else {
            shared
                .changed
                .wait_timeout(state, POLL)
                .unwrap_or_else(|p| p.into_inner())
                .0
        };
    }
}
