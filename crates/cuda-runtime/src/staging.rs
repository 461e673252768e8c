//! Host-to-device uploads through pinned (page-locked) staging buffers.
//!
//! Why: an asynchronous copy from ordinary (pageable) host memory is not asynchronous.
//! The driver must first copy the bytes into page-locked memory it owns, and it waits
//! for the stream's queued work before it does (the CUDA documentation's "API
//! synchronization behavior"). A training step uploads its batch while the previous
//! step's kernels, or a replayed CUDA graph, still run, so every pageable upload stalls
//! the host until the GPU is idle. PyTorch's answer is `pin_memory=True` plus
//! `non_blocking=True`; ditto does the same inside every upload: the bytes are copied
//! into a pinned buffer on the host, and the device copies from there while the host
//! goes on.
//!
//! The price of that freedom is a rule: a staging buffer must not be rewritten while a
//! copy queued from it has not run. Each device has a small ring of buffers, each with
//! a CUDA event recorded after its copy; a buffer is reused only once its event has
//! completed. The pool hands out the least recently used buffer; while that one's copy
//! is still queued it grows instead, up to [`SLOTS`] buffers, and only then does an
//! upload wait. The deferred stand-in, which runs queued copies late, shows a
//! missing wait as corrupted uploads.
//!
//! Pinned memory is a scarce system resource (it cannot be paged out), so each buffer
//! holds at most [`MAX_STAGED_BYTES`]; larger uploads (a model's weights, once) and any
//! upload when pinned memory cannot be had take the driver's pageable path, which is
//! slower but gives the same bytes.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard, OnceLock};

use cudarc::driver::{result, sys};

use crate::driver_error;
use crate::Result;

/// Buffers per device at most. A training step uploads two tensors (input and targets);
/// 16 buffers let the host run 8 steps ahead of the GPU before an upload waits.
pub const SLOTS: usize = 16;

/// Uploads larger than this take the pageable path (pinned memory is kept small: at
/// most `SLOTS` times this, 128 MiB, per device).
pub const MAX_STAGED_BYTES: usize = 8 << 20;

/// The smallest buffer allocated (rounded up to a power of two above it, so a batch
/// that grows a little does not reallocate each step).
const MIN_BUFFER_BYTES: usize = 64 << 10;

/// One pinned buffer and the event that completes when the copy queued from it has run.
struct Slot {
    buffer: *mut u8,
    capacity: usize,
    /// Recorded after the last copy from `buffer`; `None` until the first one.
    copied: Option<sys::CUevent>,
}

// SAFETY: the pointers are a pinned host allocation and a driver event, both usable
// from any thread while the device's context is current; a slot is used by one thread
// at a time (taken out of its pool while in use).
unsafe impl Send for Slot {}

/// A device's staging buffers. The lock is held only to take or return a buffer, never
/// across a driver call: a call on a stream can wait for work queued before it (the
/// stand-in's eager mode does), and one thread's wait must not hold up another's upload.
#[derive(Default)]
struct Pool {
    /// Buffers not in use, the least recently used first.
    free: VecDeque<Slot>,
    /// Buffers in all, in use or free (at most [`SLOTS`]).
    total: usize,
    /// Set once pinned memory was refused: later uploads go pageable without asking.
    unavailable: bool,
}

fn pools() -> MutexGuard<'static, HashMap<usize, Pool>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Pool>>> = OnceLock::new();
    POOLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Pool {
    /// A new empty buffer while there are fewer than [`SLOTS`].
    fn grow(&mut self) -> Option<Slot> {
        (self.total < SLOTS).then(|| {
            self.total += 1;
            Slot {
                buffer: std::ptr::null_mut(),
                capacity: 0,
                copied: None,
            }
        })
    }
}

/// Takes device `ordinal`'s least recently used buffer, or a new empty one while there
/// are fewer than [`SLOTS`]; `None` when all are in use by other threads or pinned
/// memory was refused. Its last copy may still be queued: [`take_ready`] checks, outside
/// the lock.
fn take(ordinal: usize) -> Option<Slot> {
    let mut pools = pools();
    let pool = pools.entry(ordinal).or_default();
    if pool.unavailable {
        return None;
    }
    pool.free.pop_front().or_else(|| pool.grow())
}

/// Returns a buffer to its pool, or, with `refused` (pinned memory could not be had, or
/// the device faulted), stops staging on that device; the buffer is then kept (freeing
/// pinned memory whose copy may be queued would be unsafe) but never used again.
fn give_back(ordinal: usize, slot: Slot, refused: bool) {
    let mut pools = pools();
    let pool = pools.entry(ordinal).or_default();
    if refused {
        pool.unavailable = true;
    } else {
        pool.free.push_back(slot);
    }
}

/// A new empty buffer for device `ordinal` while there are fewer than [`SLOTS`], taken
/// instead of `busy` (whose copy is still queued), which goes back to the front of the
/// pool; `busy` again when the pool is full.
fn instead_of(ordinal: usize, busy: Slot) -> Slot {
    let mut pools = pools();
    let pool = pools.entry(ordinal).or_default();
    match pool.grow() {
        Some(fresh) => {
            pool.free.push_front(busy);
            fresh
        }
        None => busy,
    }
}

/// A buffer of device `ordinal` ready to take `len` bytes (its last copy run, big
/// enough); `None` for the pageable path: too large to stage, every buffer in use by
/// other threads, or pinned memory refused (staging then stops on this device).
fn take_ready(ordinal: usize, len: usize) -> Option<Slot> {
    if len > MAX_STAGED_BYTES {
        return None;
    }
    let mut slot = take(ordinal)?;
    if !idle(&slot) {
        // The host runs ahead of the GPU (it reads the loss every few steps, say): grow
        // the pool rather than wait, as PyTorch's caching host allocator does.
        slot = instead_of(ordinal, slot);
    }
    if ready(&mut slot, len) {
        Some(slot)
    } else {
        give_back(ordinal, slot, true);
        None
    }
}

/// Whether the copy last queued from `slot` has run (a query: it never waits).
fn idle(slot: &Slot) -> bool {
    // SAFETY: a live event of this device.
    slot.copied
        .is_none_or(|event| unsafe { result::event::query(event) }.is_ok())
}

/// Queues a copy of `data` to device address `dst` on `stream` of device `ordinal`.
/// `data` may be reused as soon as this returns. The caller has bound the device's
/// context to this thread and checked that `dst` has room for `data`.
///
/// # Safety
/// `dst .. dst + data.len()` must be device memory of `ordinal` that stays allocated
/// until the copy has run on `stream`.
pub unsafe fn upload(
    ordinal: usize,
    stream: sys::CUstream,
    dst: sys::CUdeviceptr,
    data: &[u8],
) -> Result<()> {
    const OP: &str = "upload";
    if data.is_empty() {
        return Ok(());
    }
    let Some(mut slot) = take_ready(ordinal, data.len()) else {
        // SAFETY: the caller's contract; the driver copies pageable memory before it
        // returns, so `data` need not outlive the call.
        return unsafe { result::memcpy_htod_async(dst, data, stream) }
            .map_err(driver_error(ordinal, OP));
    };
    // SAFETY: `buffer` holds `capacity >= data.len()` bytes, its last copy has run
    // (`ready` waited for it), and this thread alone holds the slot.
    let pinned = unsafe { std::slice::from_raw_parts_mut(slot.buffer, data.len()) };
    pinned.copy_from_slice(data);
    let queued = (|| {
        // SAFETY: the caller's contract for `dst`; `pinned` stays allocated and
        // unwritten until the event recorded next has completed.
        unsafe { result::memcpy_htod_async(dst, &*pinned, stream) }?;
        let event = match slot.copied {
            Some(event) => event,
            None => {
                let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
                slot.copied = Some(event);
                event
            }
        };
        // SAFETY: `event` and `stream` belong to this device's context.
        unsafe { result::event::record(event, stream) }
    })();
    give_back(ordinal, slot, queued.is_err());
    queued.map_err(driver_error(ordinal, OP))
}

/// Makes `slot` ready for `len` bytes: waits for its last copy (normally long done:
/// the pool hands out the least recently used buffer) and grows its buffer if needed.
/// `false` when the device reports a fault or pinned memory is refused.
fn ready(slot: &mut Slot, len: usize) -> bool {
    if let Some(event) = slot.copied {
        // SAFETY: a live event of this device.
        let done = match unsafe { result::event::query(event) } {
            Err(e) if e.0 == sys::cudaError_enum::CUDA_ERROR_NOT_READY => {
                // SAFETY: as above.
                unsafe { result::event::synchronize(event) }
            }
            other => other,
        };
        if done.is_err() {
            return false;
        }
    }
    if slot.capacity >= len {
        return true;
    }
    let capacity = len
        .next_power_of_two()
        .clamp(MIN_BUFFER_BYTES, MAX_STAGED_BYTES);
    // SAFETY: a fresh pinned allocation of `capacity` bytes (flags 0: this context,
    // not mapped).
    match unsafe { result::malloc_host(capacity, 0) } {
        Ok(buffer) => {
            if !slot.buffer.is_null() {
                // SAFETY: allocated by `malloc_host`, and idle (waited for above).
                let _ = unsafe { result::free_host(slot.buffer as *mut c_void) };
            }
            slot.buffer = buffer as *mut u8;
            slot.capacity = capacity;
            true
        }
        // Locked-memory limits (containers, ulimit -l) can refuse pinned memory;
        // pageable uploads are slower, never wrong.
        Err(_) => false,
    }
}
