//! A caching, stream-ordered allocator for CUDA storage (PyTorch's
//! `CUDACachingAllocator`, in its simplest useful form).
//!
//! Why: a training step makes dozens of short-lived buffers of the same sizes. Asking
//! the driver for each (`cuMemAllocAsync`, and `cuMemFreeAsync` when it dies) costs host
//! time per op that dwarfs a small kernel; dfdx measured a small ResNet 3-5x slower in
//! PyTorch with its caching allocator off. Here a dead buffer goes back to its device's
//! cache, and the next request of the same size class takes it without a driver call.
//!
//! Why reuse is safe without events: every ditto operation on a device runs on that
//! device's one stream ([`crate::default_stream`]), so work queued with a reused block
//! starts only after all work queued with its previous owner has finished (the
//! "stream-ordered" part). A buffer used on another stream would need an event first;
//! ditto has none.
//!
//! Size classes: requests are rounded up to a multiple of 512 bytes, and above 4 KiB to
//! an eighth of the request's power of two (at most 12.5% slack), so nearby sizes share
//! blocks. On the CUDA stand-in (docs/cuda-standin.md) classes are exact instead: its
//! guard page sits right after the bytes asked for, so a kernel overrunning its buffer
//! by one byte still faults there.
//!
//! Memory goes back to the driver when asked ([`empty_cache`]) and under pressure: an
//! allocation the driver refuses empties the cache and tries once more before it is an
//! error. Never during a CUDA graph capture of the device: the frees would land in the
//! graph, so there an allocation the driver refuses is at once a
//! [`CudaError::OutOfMemory`] (with the bytes the cache holds), and [`empty_cache`] is refused.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use cudarc::driver::{sys::CUresult, CudaSlice, DriverError};

use crate::registry::guarded;
use crate::{default_stream, driver_error, get_device_name};
use crate::{CudaError, Result};

/// Memory statistics of one device's allocator (`torch.cuda.memory_stats`, abridged).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes of the blocks held by live buffers (`torch.cuda.memory_allocated`),
    /// counted by size class.
    pub allocated_bytes: u64,
    /// Bytes of the blocks kept in the cache for reuse.
    pub cached_bytes: u64,
    /// `allocated_bytes + cached_bytes`: all the device memory the allocator holds
    /// (`torch.cuda.memory_reserved`); filled in by [`memory_stats`].
    pub reserved_bytes: u64,
    /// The largest `allocated_bytes` seen since the process started or the last
    /// [`reset_peak_memory_stats`] (`torch.cuda.max_memory_allocated`).
    pub peak_allocated_bytes: u64,
    /// Requests answered from the cache.
    pub cache_hits: u64,
    /// Requests that asked the driver for memory.
    pub driver_allocations: u64,
    /// Blocks given back to the driver (by [`empty_cache`] or under memory pressure).
    pub driver_frees: u64,
}

/// Free blocks by size class.
type FreeBlocks = HashMap<usize, Vec<CudaSlice<u8>>>;

/// One device's cache: free blocks by size class, and the statistics.
#[derive(Default)]
struct Pool {
    free: FreeBlocks,
    /// The private pools of CUDA graphs (by pool id, see [`crate::graph`]): blocks made
    /// or taken during a capture come back here, not to `free`, while the graph lives.
    private: HashMap<u64, FreeBlocks>,
    stats: MemoryStats,
    /// Whether size classes are exact (the CUDA stand-in), decided at first use.
    exact_classes: Option<bool>,
}

/// The pool of device `ordinal` (pools live for the process, like contexts).
fn pool(ordinal: usize) -> &'static Mutex<Pool> {
    static POOLS: OnceLock<Mutex<HashMap<usize, &'static Mutex<Pool>>>> = OnceLock::new();
    let pools = POOLS.get_or_init(|| Mutex::new(HashMap::new()));
    // A panic while holding the lock cannot leave the map half-updated (one insert).
    let mut map = pools.lock().unwrap_or_else(|p| p.into_inner());
    map.entry(ordinal)
        .or_insert_with(|| Box::leak(Box::new(Mutex::new(Pool::default()))))
}

fn lock(ordinal: usize) -> std::sync::MutexGuard<'static, Pool> {
    // Every update under the lock is a few integer adds and one push or pop: a panic
    // cannot leave the pool inconsistent, so a poisoned lock is still usable.
    pool(ordinal).lock().unwrap_or_else(|p| p.into_inner())
}

/// The size class of a request of `bytes` (at least 1).
fn size_class(bytes: usize, exact: bool) -> usize {
    const MIN_BLOCK: usize = 512;
    if exact {
        return bytes.max(1);
    }
    let bytes = bytes.max(1);
    let step = if bytes <= 4096 {
        MIN_BLOCK
    } else {
        // An eighth of the largest power of two not above `bytes`.
        (1usize << (usize::BITS - 1 - bytes.leading_zeros())) / 8
    };
    bytes.div_ceil(step).saturating_mul(step)
}

/// Whether device `ordinal` is the CUDA stand-in, whose guard pages want exact sizes.
fn is_standin(ordinal: usize) -> bool {
    get_device_name(ordinal).is_ok_and(|name| name.starts_with("CUDA stand-in"))
}

/// Whether device `ordinal`'s size classes are exact (decided at its first allocation).
fn exact_classes(ordinal: usize) -> bool {
    let known = lock(ordinal).exact_classes;
    match known {
        Some(exact) => exact,
        None => {
            let exact = is_standin(ordinal);
            lock(ordinal).exact_classes = Some(exact);
            exact
        }
    }
}

/// A block of at least `bytes` bytes on device `ordinal`, from the cache or the driver,
/// and the graph pool it belongs to (during a capture of the device, see
/// [`crate::graph`]: it goes back there when released). Its contents are whatever its
/// last owner left (or, new, whatever the driver gives).
pub fn allocate(ordinal: usize, bytes: usize) -> Result<(CudaSlice<u8>, Option<u64>)> {
    let graph_pool = crate::capture_state::capture_pool(ordinal)?;
    let class = size_class(bytes, exact_classes(ordinal));
    {
        let mut pool = lock(ordinal);
        // A capture takes its own pool's blocks first, then the shared cache's.
        let private = graph_pool
            .and_then(|id| pool.private.get_mut(&id))
            .and_then(|free| free.get_mut(&class))
            .and_then(Vec::pop);
        if let Some(block) = private.or_else(|| pool.free.get_mut(&class).and_then(Vec::pop)) {
            let stats = &mut pool.stats;
            stats.cache_hits += 1;
            stats.cached_bytes -= class as u64;
            stats.allocated_bytes += class as u64;
            stats.peak_allocated_bytes = stats.peak_allocated_bytes.max(stats.allocated_bytes);
            return Ok((block, graph_pool));
        }
    }
    let block = from_driver(ordinal, class, graph_pool.is_some())?;
    Ok((block, graph_pool))
}

/// A block of at least `bytes` bytes on device `ordinal` that comes from the driver,
/// never from the shared cache or a graph's pool; released, it joins the shared cache.
///
/// Why: during a capture every cached block may be one the capture's own nodes write
/// (a temporary freed earlier in the region goes to the graph's pool, an older tensor
/// the region overwrote and dropped goes to the shared cache), and a replay runs those
/// nodes again. A buffer the host fills between replays (a generator's device words)
/// would be overwritten there. New driver memory is written by no node of the capture:
/// nothing goes back to the driver while one is in progress ([`empty_cache`] refuses).
pub fn allocate_uncached(ordinal: usize, bytes: usize) -> Result<CudaSlice<u8>> {
    let capturing = crate::capture_state::capture_pool(ordinal)?.is_some();
    let class = size_class(bytes, exact_classes(ordinal));
    from_driver(ordinal, class, capturing)
}

/// A new block of `class` bytes from the driver, counted
/// in the statistics. Out of memory outside a capture, the cache is given back and the
/// driver asked once more; during one it cannot be (see [`empty_cache`]), and the error
/// says so.
fn from_driver(ordinal: usize, class: usize, capturing: bool) -> Result<CudaSlice<u8>> {
    let out_of_memory = |e: &DriverError| e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY;
    let block = if capturing {
        driver_allocate_during_capture(ordinal, class)?.map_err(|e| {
            if out_of_memory(&e) {
                CudaError::OutOfMemory {
                    ordinal,
                    bytes: class as u64,
                    during_capture: Some(lock(ordinal).stats.cached_bytes),
                }
            } else {
                driver_error(ordinal, "alloc")(e)
            }
        })?
    } else {
        match driver_allocate(ordinal, class)? {
            Err(e) if out_of_memory(&e) => {
                // Memory pressure: give the cache back and try once more.
                empty_cache(ordinal)?;
                driver_allocate(ordinal, class)?.map_err(|e| {
                    if out_of_memory(&e) {
                        CudaError::OutOfMemory {
                            ordinal,
                            bytes: class as u64,
                            during_capture: None,
                        }
                    } else {
                        driver_error(ordinal, "alloc")(e)
                    }
                })?
            }
            other => other.map_err(driver_error(ordinal, "alloc"))?,
        }
    };
    let mut pool = lock(ordinal);
    let stats = &mut pool.stats;
    stats.driver_allocations += 1;
    stats.allocated_bytes += class as u64;
    stats.peak_allocated_bytes = stats.peak_allocated_bytes.max(stats.allocated_bytes);
    Ok(block)
}

/// One driver allocation of `bytes` on the device's stream: the driver's answer, or a
/// typed error when there is no usable driver at all.
fn driver_allocate(
    ordinal: usize,
    bytes: usize,
) -> Result<std::result::Result<CudaSlice<u8>, DriverError>> {
    let stream = default_stream(ordinal)?;
    // Guarded: a half-installed driver is a typed error, not a panic.
    guarded(ordinal, || {
        // SAFETY: the block's bytes are left unset; `CudaStorage` either fills them or
        // hands them to a kernel that writes every element before anyone reads.
        Ok(unsafe { stream.alloc::<u8>(bytes) })
    })
}

/// A driver allocation while the device's stream is captured: `cuMemAlloc`, not the
/// stream-ordered `cuMemAllocAsync` (which a capture would record as a graph node).
fn driver_allocate_during_capture(
    ordinal: usize,
    bytes: usize,
) -> Result<std::result::Result<CudaSlice<u8>, DriverError>> {
    let stream = default_stream(ordinal)?;
    guarded(ordinal, || {
        Ok(stream.context().bind_to_thread().and_then(|()| {
            // SAFETY: a fresh allocation of `bytes` bytes, handed to cudarc to own (and
            // free); its bytes are left unset, as for `driver_allocate`.
            unsafe {
                let ptr = cudarc::driver::result::malloc_sync(bytes)?;
                Ok(stream.upgrade_device_ptr::<u8>(ptr, bytes))
            }
        }))
    })
}

/// Takes back a block whose buffer died: it waits in the cache (or in the private pool
/// of the graph it was made for, while that graph lives) for the next request of its
/// class. No driver call, so dropping a tensor is cheap on any thread.
///
/// A block freed while its device is being captured joins that capture's pool even if
/// it was made before (or for a graph now gone): the region may have written it (an older tensor it overwrote and
/// dropped), and every replay would write it again, so nothing outside the graph may
/// get it while the graph lives.
pub fn release(ordinal: usize, block: CudaSlice<u8>, graph_pool: Option<u64>) {
    let capture_pool = crate::capture_state::active().get(&ordinal).map(|a| a.pool);
    let class = block.len();
    let mut pool = lock(ordinal);
    pool.stats.allocated_bytes = pool.stats.allocated_bytes.saturating_sub(class as u64);
    pool.stats.cached_bytes += class as u64;
    let pool = &mut *pool;
    // Its own graph's pool while that graph lives, else the capture's, else the cache.
    let target = graph_pool
        .filter(|id| pool.private.contains_key(id))
        .or(capture_pool);
    let free = match target.and_then(|id| pool.private.get_mut(&id)) {
        Some(private) => private,
        None => &mut pool.free,
    };
    free.entry(class).or_default().push(block);
}

/// Opens graph pool `id` on device `ordinal` (a capture begins).
pub(crate) fn open_pool(ordinal: usize, id: u64) {
    lock(ordinal).private.entry(id).or_default();
}

/// Closes graph pool `id` (its graph is gone): its free blocks join the shared cache,
/// and blocks of it still in use go there when they die.
pub(crate) fn close_pool(ordinal: usize, id: u64) {
    let mut pool = lock(ordinal);
    if let Some(private) = pool.private.remove(&id) {
        for (class, blocks) in private {
            pool.free.entry(class).or_default().extend(blocks);
        }
    }
}

/// Gives every cached block of device `ordinal` back to the driver
/// (`torch.cuda.empty_cache`). Live buffers are untouched. The frees are queued on the
/// device's stream, after the work that may still use the blocks.
///
/// Refused (a [`CudaError::Capture`] error, nothing freed) while the device is being
/// captured, from any thread: the frees would be stream-ordered frees on the captured
/// stream, which the driver refuses there, invalidating the capture, and the blocks
/// would stay allocated while the statistics counted them as given back.
pub fn empty_cache(ordinal: usize) -> Result<()> {
    // Held until the frees are queued, so no capture of the device begins meanwhile and
    // records them.
    let captures = crate::capture_state::active();
    if captures.contains_key(&ordinal) {
        return Err(crate::capture_state::capture_error(
            ordinal,
            "empty_cache",
            "was called during a capture of the device: its frees would be recorded \
             into the graph (the driver refuses them and invalidates the capture); \
             call it before the capture or after it ends",
        ));
    }
    let blocks: Vec<CudaSlice<u8>> = {
        let mut pool = lock(ordinal);
        let blocks: Vec<_> = pool.free.drain().flat_map(|(_, v)| v).collect();
        let freed: u64 = blocks.iter().map(|b| b.len() as u64).sum();
        // Graph pools keep their blocks: a replay still uses them.
        pool.stats.cached_bytes -= freed;
        pool.stats.driver_frees += blocks.len() as u64;
        blocks
    };
    if let Some(first) = blocks.first() {
        // cudarc frees on the calling thread's current context: make it this device's.
        let context = first.context().clone();
        guarded(ordinal, || {
            context
                .bind_to_thread()
                .map_err(driver_error(ordinal, "empty_cache"))
        })?;
        drop(blocks);
    }
    drop(captures);
    Ok(())
}

/// The allocator's statistics for device `ordinal` (zeros before its first allocation).
#[must_use]
pub fn memory_stats(ordinal: usize) -> MemoryStats {
    let mut stats = lock(ordinal).stats;
    stats.reserved_bytes = stats.allocated_bytes + stats.cached_bytes;
    stats
}

/// Bytes held by live buffers on device `ordinal` (`torch.cuda.memory_allocated`).
#[must_use]
pub fn memory_allocated(ordinal: usize) -> u64 {
    memory_stats(ordinal).allocated_bytes
}

/// Bytes the allocator holds on device `ordinal`, live or cached
/// (`torch.cuda.memory_reserved`).
#[must_use]
pub fn memory_reserved(ordinal: usize) -> u64 {
    memory_stats(ordinal).reserved_bytes
}

/// The peak of [`memory_allocated`] (`torch.cuda.max_memory_allocated`).
#[must_use]
pub fn max_memory_allocated(ordinal: usize) -> u64 {
    memory_stats(ordinal).peak_allocated_bytes
}

/// Restarts the peak at the current [`memory_allocated`]
/// (`torch.cuda.reset_peak_memory_stats`).
pub fn reset_peak_memory_stats(ordinal: usize) {
    let mut pool = lock(ordinal);
    pool.stats.peak_allocated_bytes = pool.stats.allocated_bytes;
}

#[cfg(test)]
mod tests {
    use super::size_class;

    #[test]
    fn size_classes_round_up_by_at_most_an_eighth_above_4_kib() {
        assert_eq!(size_class(0, false), 512);
        assert_eq!(size_class(1, false), 512);
        assert_eq!(size_class(513, false), 1024);
        assert_eq!(size_class(4096, false), 4096);
        assert_eq!(size_class(4097, false), 4096 + 512);
        assert_eq!(size_class(1 << 20, false), 1 << 20);
        assert_eq!(size_class((1 << 20) + 1, false), (1 << 20) + (1 << 17));
        for bytes in [5000usize, 70_000, 3_000_000, 123_456_789] {
            let class = size_class(bytes, false);
            assert!(
                class >= bytes && class - bytes <= bytes / 8,
                "{bytes} -> {class}"
            );
        }
    }

    #[test]
    fn stand_in_classes_are_exact() {
        assert_eq!(size_class(0, true), 1);
        assert_eq!(size_class(4097, true), 4097);
    }
}
