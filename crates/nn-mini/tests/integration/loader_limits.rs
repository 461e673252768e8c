//! The data loader never panics, aborts or hangs on huge inputs: datasets of `usize::MAX`
//! and 2^40 samples, `prefetch_factor(usize::MAX)`, a state at epoch `u64::MAX`. Each
//! call either works (unshuffled orders are computed, not stored) or returns a typed
//! error naming the limit, without a large allocation: a counting allocator records the
//! largest single request while the calls run.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nn_mini::data::{DataLoader, Dataset, LoaderState, Sample, SampleRng, MAX_SHUFFLED_LEN};
use nn_mini::NnError;
use tensor_core::{Device, Tensor};

/// The system allocator, recording the largest single allocation.
struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Sample `i` is `[i]`; any length, nothing stored.
struct Indices(usize);

impl Dataset for Indices {
    fn len(&self) -> usize {
        self.0
    }

    fn get(&self, index: usize, _rng: &mut SampleRng) -> nn_mini::Result<Sample> {
        Ok(Sample {
            input: Tensor::from_vec(vec![index as f64], &[1], Device::Cpu)?,
            target: Tensor::from_vec(vec![0i64], &[], Device::Cpu)?,
        })
    }
}

fn builder(len: usize, shuffle: bool) -> nn_mini::data::DataLoaderBuilder {
    DataLoader::builder(Arc::new(Indices(len)))
        .batch_size(4)
        .shuffle(shuffle)
        .seed(1)
}

/// Runs `f` on its own thread; fails the test if it has not returned after 30 s (the
/// old loader never returned from `prefetch_factor(usize::MAX)`), and returns its
/// result with how long it took and the largest allocation made meanwhile.
fn guarded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    LARGEST.store(0, Ordering::Relaxed);
    let (tx, rx) = channel();
    let started = Instant::now();
    std::thread::spawn(move || tx.send(f()));
    let out = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("{what}: no answer after 30 s"));
    let largest = LARGEST.load(Ordering::Relaxed);
    println!(
        "{what}: {:?}, largest allocation {largest} bytes",
        started.elapsed()
    );
    assert!(
        largest < 1 << 26,
        "{what}: allocated {largest} bytes at once"
    );
    out
}

fn limit_of(result: nn_mini::Result<DataLoader>) -> &'static str {
    match result {
        Err(NnError::LoaderLimit { constant, .. }) => constant,
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("built"),
    }
}

/// All in one test: the allocator's record is process-wide.
#[test]
fn huge_inputs_get_batches_or_typed_errors_never_an_abort() {
    // Unshuffled: the order is the identity, computed per batch, for any length.
    for len in [usize::MAX, 1 << 40] {
        for workers in [0, 2] {
            let indices = guarded(
                &format!("unshuffled len {len}, {workers} workers"),
                move || {
                    let mut l = builder(len, false).num_workers(workers).build().unwrap();
                    let first = l.next_batch().unwrap().indices;
                    let state = l.state().unwrap();
                    assert_eq!(state.dataset_len, len as u64);
                    // Jump to the last batch of the epoch: its indices end at len - 1.
                    let last = l.batches_per_epoch() as u64 - 1;
                    l.set_state(&LoaderState {
                        position: last,
                        ..state
                    })
                    .unwrap();
                    let tail = l.next_batch().unwrap().indices;
                    assert_eq!(*tail.last().unwrap(), len - 1);
                    assert_eq!((l.epoch(), l.position()), (1, 0));
                    first
                },
            );
            assert_eq!(indices, [0, 1, 2, 3]);
        }
    }
    // A batch as large as the dataset: refused when its indices cannot be held.
    let err = guarded("batch_size usize::MAX over usize::MAX samples", || {
        let mut l = builder(usize::MAX, false)
            .batch_size(usize::MAX)
            .build()
            .unwrap();
        l.next_batch().unwrap_err()
    });
    assert!(err.to_string().contains("cannot hold"), "{err}");

    // Shuffled: the permutation is stored, so the length is limited.
    for len in [usize::MAX, 1 << 40, MAX_SHUFFLED_LEN + 1] {
        let constant = guarded(&format!("shuffled len {len}"), move || {
            limit_of(builder(len, true).build())
        });
        assert_eq!(constant, "MAX_SHUFFLED_LEN");
    }

    // prefetch_factor * num_workers is checked, overflow included.
    for (prefetch, workers) in [(usize::MAX, 2), (2, usize::MAX), (4097, 1), (2049, 2)] {
        let constant = guarded(
            &format!("prefetch_factor {prefetch}, {workers} workers"),
            move || {
                limit_of(
                    builder(100, false)
                        .prefetch_factor(prefetch)
                        .num_workers(workers)
                        .build(),
                )
            },
        );
        assert_eq!(constant, "MAX_IN_FLIGHT");
    }
    let err = builder(100, false)
        .prefetch_factor(usize::MAX)
        .num_workers(2)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("36893488147419103230"), "{err}");
    builder(100, false)
        .prefetch_factor(2048)
        .num_workers(2)
        .build()
        .unwrap()
        .next_batch()
        .unwrap();

    // Epoch numbers do not wrap: a state at epoch u64::MAX is exhausted, and the last
    // batch of epoch u64::MAX - 1 is the last batch there is.
    for workers in [0, 2] {
        guarded(&format!("epoch u64::MAX, {workers} workers"), move || {
            let mut l = builder(10, true).num_workers(workers).build().unwrap();
            let state = l.state().unwrap();
            l.set_state(&LoaderState {
                epoch: u64::MAX,
                ..state
            })
            .unwrap();
            assert!(matches!(l.next_batch(), Err(NnError::EpochsExhausted)));
            assert!(matches!(l.next_batch(), Err(NnError::EpochsExhausted)));
            l.set_state(&LoaderState {
                epoch: u64::MAX - 1,
                position: 2,
                ..state
            })
            .unwrap();
            let last = l.next_batch().unwrap();
            assert_eq!(
                (last.epoch, last.index, last.indices.len()),
                (u64::MAX - 1, 2, 2)
            );
            assert_eq!((l.epoch(), l.position()), (u64::MAX, 0));
            let err = l.next_batch().unwrap_err();
            assert!(err.to_string().contains("do not wrap"), "{err}");
            assert!(l.iter_epoch().next().unwrap().is_err());
        });
    }
}
