//! The CPU's nondeterministic fast paths: contributions added into shared targets in the
//! order threads happen to get there (what `Algorithm::Fast`, and `Algorithm::Auto` in
//! `Off` mode where it pays, run).
//!
//! Why these are faster: the deterministic path first sorts the contributions by target
//! (a serial counting sort), then each owner gathers its source rows from all over the
//! source. The arrival-order `index_add` skips the sort and streams through the source
//! once. When the targets are few compared with the contributions (an embedding with a
//! small vocabulary, a segment sum), each worker adds into its own private copy of the
//! targets (in cache, no locks), then adds that copy into the shared rows under per-row
//! locks as it finishes. Which chunks a worker claims, and the order in which workers
//! merge, follow thread timing: the float rounding of every row does too.
//!
//! With more targets the private copies would cost more than they save; workers then add
//! each source row straight into its shared target row under that row's lock. That path
//! measured no faster than the deterministic one (`benches/RESULTS.md`), so `Auto` never
//! picks it; it runs only for an explicit `Algorithm::Fast`.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use rayon::prelude::*;

use crate::ops::accumulate::{
    index_add_serial, parallel_pays, IndexAddShape, ScatterLanes, Shared,
};
use crate::ops::Float;

/// Source rows a worker claims at a time: small, so workers interleave on shared rows.
const CHUNK_ROWS: usize = 64;

/// True when private per-worker copies of the targets pay off: the targets are small
/// next to the source (at least 4 contributions per target element per worker).
pub(crate) fn private_copies_pay(shape: IndexAddShape) -> bool {
    let threads = rayon::current_num_threads();
    let targets = shape.outer * shape.size * shape.inner;
    parallel_pays(shape.source_elements())
        && targets.saturating_mul(threads * 4) <= shape.source_elements()
}

/// Arrival-order `index_add` (see the module docs). One thread, or little work: the
/// serial loop (which is then deterministic).
pub(crate) fn index_add_fast<T: Float>(
    dst: &mut [T],
    src: &[T],
    index: &[usize],
    shape: IndexAddShape,
    alpha: T,
) {
    if !parallel_pays(shape.source_elements()) {
        return index_add_serial(dst, src, index, shape, alpha);
    }
    let rows = shape.outer * shape.size;
    let work = SharedRows {
        shared: Shared::new(dst),
        locks: (0..rows).map(|_| AtomicBool::new(false)).collect(),
        next: AtomicUsize::new(0),
        src,
        index,
        shape,
    };
    let workers = rayon::current_num_threads();
    let private = private_copies_pay(shape);
    (0..workers).into_par_iter().for_each(|_| {
        if private {
            work.worker_with_private_copy(alpha);
        } else {
            work.worker_with_row_locks(alpha);
        }
    });
}

/// What the arrival-order workers share: the target rows with one lock each, the next
/// unclaimed source row, and the source with its index.
struct SharedRows<'a, T> {
    shared: Shared<T>,
    locks: Vec<AtomicBool>,
    next: AtomicUsize,
    src: &'a [T],
    index: &'a [usize],
    shape: IndexAddShape,
}

impl<T: Float> SharedRows<'_, T> {
    /// Claims chunks of `CHUNK_ROWS` source rows until none are left, calling `add` with
    /// each claimed row's target row and its source row. Which worker claims which chunk
    /// follows thread timing.
    fn for_each_claimed_row(&self, mut add: impl FnMut(usize, &[T])) {
        let IndexAddShape {
            outer,
            size,
            inner,
            n,
        } = self.shape;
        loop {
            let start = self.next.fetch_add(CHUNK_ROWS, Ordering::Relaxed);
            if start >= outer * n {
                return;
            }
            for item in start..(start + CHUNK_ROWS).min(outer * n) {
                let target = (item / n) * size + self.index[item % n];
                add(target, &self.src[item * inner..][..inner]);
            }
        }
    }

    /// Adds `scale * row` into shared target row `target` under that row's lock.
    fn add_locked(&self, target: usize, scale: T, row: &[T]) {
        let inner = self.shape.inner;
        acquire(&self.locks[target]);
        // SAFETY: every write to shared row `target` happens under `locks[target]`.
        unsafe { self.shared.add_row(target * inner, scale, row) };
        self.locks[target].store(false, Ordering::Release);
    }

    /// Adds the claimed rows into a private copy of the targets, then adds the copy's
    /// touched rows into the shared rows, one row lock at a time.
    fn worker_with_private_copy(&self, alpha: T) {
        let IndexAddShape {
            outer, size, inner, ..
        } = self.shape;
        let mut copy: Option<(Vec<T>, Vec<bool>)> = None;
        self.for_each_claimed_row(|target, src_row| {
            let (rows, touched) = copy.get_or_insert_with(|| {
                (
                    vec![T::ZERO; outer * size * inner],
                    vec![false; outer * size],
                )
            });
            touched[target] = true;
            let row = &mut rows[target * inner..][..inner];
            crate::ops::accumulate::add_scaled(row, alpha, src_row);
        });
        let Some((rows, touched)) = copy else { return };
        let one = T::from_f64(1.0);
        for (target, _) in touched.iter().enumerate().filter(|(_, &t)| t) {
            self.add_locked(target, one, &rows[target * inner..][..inner]);
        }
    }

    /// Adds each claimed row straight into its shared target row under that row's lock.
    fn worker_with_row_locks(&self, alpha: T) {
        self.for_each_claimed_row(|target, src_row| self.add_locked(target, alpha, src_row));
    }
}

/// Spins until `lock` is taken, yielding the core after a short spin (on a machine with
/// few cores the holder may be descheduled).
fn acquire(lock: &AtomicBool) {
    let mut spins = 0u32;
    while lock
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// A float type whose values can be added atomically (a compare-and-swap loop on bits).
pub(crate) trait AtomicAdd: Float {
    /// `*target += value` as one atomic read-modify-write.
    ///
    /// # Safety
    /// `target` must be valid, aligned, and only accessed atomically while others may
    /// touch it.
    unsafe fn atomic_add(target: *mut Self, value: Self);
}

impl AtomicAdd for f32 {
    unsafe fn atomic_add(target: *mut f32, value: f32) {
        // SAFETY: the caller's contract; f32 and AtomicU32 share size and alignment.
        let cell = unsafe { AtomicU32::from_ptr(target.cast()) };
        let _ = cell.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            Some((f32::from_bits(bits) + value).to_bits())
        });
    }
}

impl AtomicAdd for f64 {
    unsafe fn atomic_add(target: *mut f64, value: f64) {
        // SAFETY: the caller's contract; f64 and AtomicU64 share size and alignment.
        let cell = unsafe { AtomicU64::from_ptr(target.cast()) };
        let _ = cell.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            Some((f64::from_bits(bits) + value).to_bits())
        });
    }
}

/// Arrival-order `scatter_add`: threads split the index elements and add with an atomic
/// compare-and-swap per element. Measured slower than the deterministic path
/// (`benches/RESULTS.md`), so no op takes it; it exists for that benchmark.
pub(crate) fn scatter_add_atomic<T: AtomicAdd>(
    dst: &mut [T],
    src: &[T],
    index: &[usize],
    lanes: &ScatterLanes,
) {
    let shared = Shared::new(dst);
    (0..lanes.bases.len() * lanes.n)
        .into_par_iter()
        .with_min_len(256)
        .for_each(|item| {
            let (l, k) = (item / lanes.n, item % lanes.n);
            let (dst_base, src_base) = lanes.bases[l];
            let target = dst_base + index[lanes.index_position(l, k)] * lanes.dst_step;
            atomic_add_at(shared, target, src[src_base + k * lanes.src_step]);
        });
}

/// `dst[i] += value` atomically, for a `dst` whose every concurrent access is this.
fn atomic_add_at<T: AtomicAdd>(dst: Shared<T>, i: usize, value: T) {
    assert!(i < dst.len, "element inside the buffer");
    // SAFETY: in bounds (checked); all concurrent accesses are atomic (the callers').
    unsafe { T::atomic_add(dst.ptr.add(i), value) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_add_adds() {
        let mut x = [1.5f32, 2.0];
        // SAFETY: a valid, unshared element.
        unsafe { f32::atomic_add(&mut x[1], 0.25) };
        assert_eq!(x, [1.5, 2.25]);
        let mut y = 1.0f64;
        // SAFETY: as above.
        unsafe { f64::atomic_add(&mut y, -3.0) };
        assert_eq!(y, -2.0);
    }
}
