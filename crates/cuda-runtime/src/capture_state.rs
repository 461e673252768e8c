//! Which device is being captured into a CUDA graph, by which thread, into which pool:
//! the state every part of the CUDA layer consults before it queues work.
//!
//! The registry (`synchronize`), the allocator (which pool a new buffer comes from) and
//! the graphs themselves all need it, and the graphs need the registry and the
//! allocator; kept here, below all three, it lets each depend on it without depending on
//! each other. `graph.rs` starts and ends captures; this file only records them.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::ThreadId;

use crate::{CudaError, Result};

/// The capture in progress on one device.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Active {
    pub(crate) thread: ThreadId,
    pub(crate) pool: u64,
}

pub(crate) fn active() -> MutexGuard<'static, HashMap<usize, Active>> {
    static ACTIVE: OnceLock<Mutex<HashMap<usize, Active>>> = OnceLock::new();
    // One insert or remove under the lock: a panic cannot leave it inconsistent.
    ACTIVE
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn capture_error(
    ordinal: usize,
    op: &'static str,
    reason: impl Into<String>,
) -> CudaError {
    CudaError::Capture {
        ordinal,
        op,
        reason: reason.into(),
    }
}

/// True while a graph capture is in progress on device `ordinal` (on any thread).
#[must_use]
pub fn is_capturing(ordinal: usize) -> bool {
    active().contains_key(&ordinal)
}

/// Errors when device `ordinal` is being captured: for `op`, work a graph cannot hold
/// (reading to or writing from the host, waiting for the device).
pub fn refuse_during_capture(ordinal: usize, op: &'static str) -> Result<()> {
    if is_capturing(ordinal) {
        return Err(capture_error(
            ordinal,
            op,
            "reads or writes host memory or waits for the device, which a graph cannot \
             replay: do it before the capture or after a replay",
        ));
    }
    Ok(())
}

/// The private pool new buffers on device `ordinal` come from while it is captured
/// (`None` when it is not); errors for a thread other than the capturing one.
pub(crate) fn capture_pool(ordinal: usize) -> Result<Option<u64>> {
    match active().get(&ordinal) {
        None => Ok(None),
        Some(a) if a.thread == std::thread::current().id() => Ok(Some(a.pool)),
        Some(_) => Err(capture_error(
            ordinal,
            "an allocation",
            "came from a thread other than the capturing one; its work would land in \
             the graph",
        )),
    }
}
