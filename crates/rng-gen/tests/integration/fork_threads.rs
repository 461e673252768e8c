//! `fork_rng` forks for the calling thread only: other threads drawing from the default
//! generators meanwhile never see a rewind, and code inside the fork sees the fork's
//! copy wherever it asks for "the default generator". `fork_rng_all_threads` keeps
//! PyTorch's process-wide rewind, and these tests show what that costs.
//!
//! The tests share the process-wide CPU generator, so each takes `LOCK` first.

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Barrier, Mutex, MutexGuard};

use rng_gen::{
    bits, default_generator, fork_rng, fork_rng_all_threads, get_rng_state, initial_seed,
    manual_seed, set_rng_state, Generator, Key,
};
use tensor_core::Device;

static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// `n` words from the default CPU generator (or from `g`).
fn words(n: usize, g: Option<&Generator>) -> Vec<u32> {
    bits(&[n], Device::Cpu, g).unwrap().to_vec::<u32>().unwrap()
}

/// 128-bit blocks of `w` that occur more than once (a rewind repeats whole blocks; by
/// chance, two of 2^18 random 128-bit blocks coincide with probability about 2^-93).
fn repeated_blocks(w: &[u32]) -> usize {
    let mut seen = HashSet::new();
    w.chunks_exact(4)
        .filter(|b| !seen.insert(b.to_vec()))
        .count()
}

/// The acceptance test: one thread draws 2^20 (> 10^6) words from the default CPU
/// generator while another loops `fork_rng`, drawing, seeding and setting the state
/// inside each fork. The drawing thread's words are exactly the uninterrupted stream of
/// the seed: no word position handed out twice, none skipped.
#[test]
fn a_thread_drawing_while_another_forks_sees_no_repeats() {
    test_support::own_process!(a_thread_drawing_while_another_forks_sees_no_repeats);
    let _guard = lock();
    manual_seed(7);
    const CHUNK: usize = 4096;
    const CHUNKS: usize = 256;
    let start = Barrier::new(2);
    let done = AtomicBool::new(false);
    let (drawn, forks) = std::thread::scope(|s| {
        let drawer = s.spawn(|| {
            start.wait();
            let mut all = Vec::with_capacity(CHUNK * CHUNKS);
            for _ in 0..CHUNKS {
                all.extend(words(CHUNK, None));
                std::thread::yield_now();
            }
            done.store(true, Ordering::Release);
            all
        });
        let forker = s.spawn(|| {
            start.wait();
            let mut forks = 0u64;
            while !done.load(Ordering::Acquire) {
                fork_rng(&[Device::Cpu], || {
                    let entry = get_rng_state();
                    let inside = words(1024, None);
                    // The copy starts where the real generator was: its words are the
                    // ones the drawing thread is about to get, as in PyTorch.
                    assert_eq!(inside, words(1024, Some(&restored(&entry))));
                    manual_seed(forks);
                    words(100, None);
                    set_rng_state(&entry).unwrap();
                })
                .unwrap();
                forks += 1;
            }
            forks
        });
        (drawer.join().unwrap(), forker.join().unwrap())
    });
    assert!(
        forks >= 10,
        "only {forks} forks ran beside the drawing thread"
    );
    let reference = words(
        CHUNK * CHUNKS,
        Some(&Generator::from_key(Device::Cpu, Key::new(7))),
    );
    let first_difference = drawn.iter().zip(&reference).position(|(a, b)| a != b);
    assert_eq!(first_difference, None, "{forks} forks ran");
    assert_eq!(repeated_blocks(&drawn), 0);
    assert_eq!(
        default_generator(Device::Cpu).unwrap().key(),
        Key {
            seed: 7,
            offset: (CHUNK * CHUNKS / 4) as u64
        },
        "only the drawing thread advanced the real generator"
    );
}

/// A generator at the state `bytes` describe.
fn restored(bytes: &[u8]) -> Generator {
    let g = Generator::new(Device::Cpu);
    g.set_state(bytes).unwrap();
    g
}

/// Thread B forks, thread A draws while B is inside, B leaves the fork, A draws again:
/// with `fork_rng_all_threads` (PyTorch's semantics) A's second draw repeats its first;
/// with `fork_rng` it continues the stream. Sequenced with channels, so deterministic.
#[test]
fn process_wide_forks_rewind_other_threads_thread_local_ones_do_not() {
    test_support::own_process!(process_wide_forks_rewind_other_threads_thread_local_ones_do_not);
    let _guard = lock();
    for thread_local in [false, true] {
        manual_seed(11);
        let (inside_tx, inside_rx) = channel::<()>();
        let (drew_tx, drew_rx) = channel::<()>();
        let first = std::thread::scope(|s| {
            s.spawn(move || {
                let body = || {
                    inside_tx.send(()).unwrap();
                    drew_rx.recv().unwrap();
                };
                if thread_local {
                    fork_rng(&[Device::Cpu], body).unwrap();
                } else {
                    fork_rng_all_threads(&[Device::Cpu], body).unwrap();
                }
            });
            inside_rx.recv().unwrap();
            let first = words(8, None);
            drew_tx.send(()).unwrap();
            first
        });
        // The scope has joined the forking thread: its block has ended.
        let second = words(8, None);
        let stream = words(16, Some(&Generator::from_key(Device::Cpu, Key::new(11))));
        if thread_local {
            assert_eq!(
                first,
                stream[..8],
                "the fork did not touch the real generator"
            );
            assert_eq!(second, stream[8..], "and the stream goes on after it");
        } else {
            assert_eq!(second, first, "the rewind hands the same words out again");
        }
    }
}

#[test]
fn inside_a_fork_every_default_generator_call_acts_on_the_copy() {
    test_support::own_process!(inside_a_fork_every_default_generator_call_acts_on_the_copy);
    let _guard = lock();
    manual_seed(3);
    words(40, None);
    let real = default_generator(Device::Cpu).unwrap();
    let before = real.key();
    let escaped = fork_rng(&[Device::Cpu], || {
        let copy = default_generator(Device::Cpu).unwrap();
        assert_eq!(copy.key(), before, "the copy starts at the real state");
        manual_seed(99);
        assert_eq!(initial_seed(), 99);
        assert_eq!(
            words(5, None),
            words(5, Some(&Generator::from_key(Device::Cpu, Key::new(99))))
        );
        let state = get_rng_state();
        assert_eq!(state, copy.get_state(), "get_rng_state reads the copy");
        // Nested: the inner fork copies the outer copy, and its changes stay inside.
        fork_rng(&[Device::Cpu], || {
            assert_eq!(get_rng_state(), state);
            manual_seed(5);
            words(9, None);
        })
        .unwrap();
        assert_eq!(
            get_rng_state(),
            state,
            "the inner fork left the outer copy alone"
        );
        // A panic inside a nested fork still drops exactly that fork's copy.
        let caught = catch_unwind(AssertUnwindSafe(|| {
            fork_rng(&[Device::Cpu], || {
                manual_seed(6);
                panic!("inside a nested fork");
            })
        }));
        assert!(caught.is_err());
        assert_eq!(get_rng_state(), state);
        // A thread started inside the fork is not forked: it uses the real generator.
        let other = std::thread::scope(|s| {
            s.spawn(|| default_generator(Device::Cpu).unwrap().key())
                .join()
                .unwrap()
        });
        assert_eq!(other, before);
        copy
    })
    .unwrap();
    assert_eq!(
        real.key(),
        before,
        "nothing inside the fork moved the real generator"
    );
    assert_eq!(default_generator(Device::Cpu).unwrap().key(), before);
    assert_eq!(initial_seed(), 3);
    // The copy that escaped the block is detached: drawing from it changes nothing.
    words(7, Some(&escaped));
    assert_eq!(default_generator(Device::Cpu).unwrap().key(), before);
}
