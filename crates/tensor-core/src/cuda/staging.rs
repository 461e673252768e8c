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
//! completed. While all are queued the ring grows, up to [`SLOTS`] buffers, and only
//! then does an upload wait. The deferred stand-in, which runs queued copies late, shows a
//! missing wait as corrupted uploads.
//!
//! Pinned memory is a scarce system resource (it cannot be paged out), so each buffer
//! holds at most [`MAX_STAGED_BYTES`]; larger uploads (a model's weights, once) and any
//! upload when pinned memory cannot be had take the driver's pageable path, which is
//! slower but gives the same bytes.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard, OnceLock};

use cudarc::driver::{result, sys};

use super::driver_error;
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
// from any thread while the device's context is current; the ring's mutex serialises
// every use.
unsafe impl Send for Slot {}

/// A device's staging ring.
#[derive(Default)]
struct Ring {
    slots: Vec<Slot>,
    next: usize,
    /// Set once pinned memory was refused: later uploads go pageable without asking.
    unavailable: bool,
}

fn rings() -> MutexGuard<'static, HashMap<usize, Ring>> {
    static RINGS: OnceLock<Mutex<HashMap<usize, Ring>>> = OnceLock::new();
    RINGS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Queues a copy of `data` to device address `dst` on `stream` of device `ordinal`.
/// `data` may be reused as soon as this returns. The caller has bound the device's
/// context to this thread and checked that `dst` has room for `data`.
///
/// # Safety
/// `dst .. dst + data.len()` must be device memory of `ordinal` that stays allocated
/// until the copy has run on `stream`.
pub(crate) unsafe fn upload(
    ordinal: usize,
    stream: sys::CUstream,
    dst: sys::CUdeviceptr,
    data: &[u8],
) -> Result<()> {
    const OP: &str = "upload";
    if data.is_empty() {
        return Ok(());
    }
    let mut rings = rings();
    let ring = rings.entry(ordinal).or_default();
    let staged = if data.len() <= MAX_STAGED_BYTES && !ring.unavailable {
        staging_buffer(ring, data.len())?
    } else {
        None
    };
    let Some(index) = staged else {
        // SAFETY: the caller's contract; the driver copies pageable memory before it
        // returns, so `data` need not outlive the call.
        return unsafe { result::memcpy_htod_async(dst, data, stream) }
            .map_err(driver_error(ordinal, OP));
    };
    let slot = &mut ring.slots[index];
    // SAFETY: `buffer` holds `capacity >= data.len()` bytes, and its last copy has run
    // (`staging_buffer` waited for its event), so nothing reads it now.
    let pinned = unsafe { std::slice::from_raw_parts_mut(slot.buffer, data.len()) };
    pinned.copy_from_slice(data);
    // SAFETY: the caller's contract for `dst`; `pinned` stays allocated and unwritten
    // until the event recorded next has completed.
    unsafe { result::memcpy_htod_async(dst, &*pinned, stream) }
        .map_err(driver_error(ordinal, OP))?;
    let event = match slot.copied {
        Some(event) => event,
        None => {
            let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
                .map_err(driver_error(ordinal, OP))?;
            slot.copied = Some(event);
            event
        }
    };
    // SAFETY: `event` and `stream` belong to this device's context.
    unsafe { result::event::record(event, stream) }.map_err(driver_error(ordinal, OP))
}

/// Whether the copy last queued from `slot` has run: `Ok(true)` idle, `Ok(false)` still
/// queued, `Err` a fault of the device's earlier work.
fn idle(slot: &Slot) -> std::result::Result<bool, result::DriverError> {
    let Some(event) = slot.copied else {
        return Ok(true);
    };
    // SAFETY: a live event of this device.
    match unsafe { result::event::query(event) } {
        Ok(()) => Ok(true),
        Err(e) if e.0 == sys::cudaError_enum::CUDA_ERROR_NOT_READY => Ok(false),
        Err(e) => Err(e),
    }
}

/// A slot whose previous copy has run, holding at least `len` bytes; `None` when pinned
/// memory cannot be had (the ring then stops asking). Like PyTorch's caching host
/// allocator, the ring grows while every buffer is still queued (a host that reads the
/// loss every k steps runs up to k steps ahead of the GPU), up to [`SLOTS`] buffers;
/// only then does the host wait, for the oldest.
fn staging_buffer(ring: &mut Ring, len: usize) -> Result<Option<usize>> {
    let count = ring.slots.len();
    let mut found = None;
    for k in 0..count {
        let i = (ring.next + k) % count;
        match idle(&ring.slots[i]) {
            Ok(true) => {
                found = Some(i);
                break;
            }
            Ok(false) => {}
            // A fault of earlier work, which the copy would report too: stop staging.
            Err(_) => {
                ring.unavailable = true;
                return Ok(None);
            }
        }
    }
    let index = match found {
        Some(i) => i,
        None if count < SLOTS => {
            ring.slots.push(Slot {
                buffer: std::ptr::null_mut(),
                capacity: 0,
                copied: None,
            });
            count
        }
        None => {
            let oldest = ring.next % count;
            if let Some(event) = ring.slots[oldest].copied {
                // SAFETY: a live event of this device.
                if unsafe { result::event::synchronize(event) }.is_err() {
                    ring.unavailable = true;
                    return Ok(None);
                }
            }
            oldest
        }
    };
    ring.next = index + 1;
    let slot = &mut ring.slots[index];
    if slot.capacity < len {
        let capacity = len
            .next_power_of_two()
            .clamp(MIN_BUFFER_BYTES, MAX_STAGED_BYTES);
        // SAFETY: a fresh pinned allocation of `capacity` bytes (flags 0: portable to
        // this context only, not mapped); the old one is idle (waited for above).
        match unsafe { result::malloc_host(capacity, 0) } {
            Ok(buffer) => {
                if !slot.buffer.is_null() {
                    // SAFETY: allocated by `malloc_host`, idle, and replaced below.
                    let _ = unsafe { result::free_host(slot.buffer as *mut c_void) };
                }
                slot.buffer = buffer as *mut u8;
                slot.capacity = capacity;
            }
            Err(_) => {
                // Locked-memory limits (containers, ulimit -l) can refuse pinned memory;
                // pageable uploads are slower, never wrong.
                ring.unavailable = true;
                return Ok(None);
            }
        }
    }
    Ok(Some(index))
}
