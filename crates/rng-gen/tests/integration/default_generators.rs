//! The per-device default generators, the process-wide seeding functions and
//! `fork_rng`. These tests share global state, so each takes `LOCK` first (tests in one
//! binary run in parallel). The CUDA checks adapt to the machine: without a GPU they
//! check PyTorch's no-GPU behaviour, with one they check the real thing.

use crate::common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};

use rng_gen::{
    cuda, default_generator, fork_rng, get_rng_state, initial_seed, manual_seed, rand, seed,
    set_rng_state, Key, RngError,
};
use tensor_core::{DType, Device};

use common::{generator, values};

static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn gpus() -> usize {
    tensor_core::cuda::device_count()
}

fn draw_default() -> Vec<f32> {
    values(&rand(&[6], DType::F32, Device::Cpu, None).unwrap())
}

#[test]
fn manual_seed_makes_default_ops_reproducible() {
    test_support::own_process!(manual_seed_makes_default_ops_reproducible);
    let _guard = lock();
    manual_seed(42);
    assert_eq!(initial_seed(), 42);
    let a = draw_default();
    let explicit: Vec<f32> =
        values(&rand(&[6], DType::F32, Device::Cpu, Some(&generator(42, 0))).unwrap());
    assert_eq!(a, explicit);
    manual_seed(42);
    assert_eq!(draw_default(), a);
    // The default generator is a shared handle.
    let handle = default_generator(Device::Cpu).unwrap();
    assert_eq!(
        handle.key(),
        Key {
            seed: 42,
            offset: 2
        }
    );
    handle.manual_seed(7);
    assert_eq!(initial_seed(), 7);
}

#[test]
fn seed_returns_the_seed_it_set() {
    test_support::own_process!(seed_returns_the_seed_it_set);
    let _guard = lock();
    let s = seed();
    assert_eq!(initial_seed(), s);
    assert_eq!(default_generator(Device::Cpu).unwrap().offset(), 0);
    let t = seed();
    assert_ne!(s, t, "two OS-entropy seeds collided (p = 2^-64)");
}

#[test]
fn rng_state_round_trip() {
    test_support::own_process!(rng_state_round_trip);
    let _guard = lock();
    manual_seed(3);
    draw_default();
    let state = get_rng_state();
    let a = draw_default();
    set_rng_state(&state).unwrap();
    assert_eq!(draw_default(), a);
    let before = default_generator(Device::Cpu).unwrap().key();
    assert!(matches!(
        set_rng_state(&state[..10]),
        Err(RngError::WrongLength { .. })
    ));
    assert_eq!(default_generator(Device::Cpu).unwrap().key(), before);
}

#[test]
fn cuda_registry_matches_the_machine() {
    test_support::own_process!(cuda_registry_matches_the_machine);
    let _guard = lock();
    let n = gpus();
    let missing = Device::Cuda(n);
    assert!(matches!(
        default_generator(missing),
        Err(RngError::NoSuchDevice { device, available }) if device == missing && available == n
    ));
    assert!(matches!(
        cuda::get_rng_state(n),
        Err(RngError::NoSuchDevice { .. })
    ));
    assert!(matches!(
        cuda::set_rng_state(&get_rng_state(), n),
        Err(RngError::NoSuchDevice { .. })
    ));
    assert_eq!(cuda::get_rng_state_all().len(), n);
    assert!(matches!(
        cuda::set_rng_state_all(&vec![get_rng_state(); n + 1]),
        Err(RngError::DeviceCountMismatch { expected, got }) if expected == n && got == n + 1
    ));
    // Seeding is a silent no-op without a GPU, like PyTorch.
    cuda::manual_seed(5);
    cuda::manual_seed_all(5);
    manual_seed(11);
    if n == 0 {
        println!("no CUDA device: checking the no-GPU behaviour only");
        assert!(matches!(
            cuda::initial_seed(),
            Err(RngError::NoSuchDevice { .. })
        ));
        assert_eq!(cuda::seed(), None);
        assert_eq!(cuda::seed_all(), None);
        cuda::set_rng_state_all(&[]).unwrap();
        return;
    }
    // manual_seed reaches every device; states round-trip per device and all at once.
    assert_eq!(cuda::initial_seed().unwrap(), 11);
    let g0 = default_generator(Device::Cuda(0)).unwrap();
    assert_eq!(g0.device(), Device::Cuda(0));
    g0.set_offset(17);
    let states = cuda::get_rng_state_all();
    cuda::manual_seed_all(1);
    cuda::set_rng_state_all(&states).unwrap();
    assert_eq!(
        g0.key(),
        Key {
            seed: 11,
            offset: 17
        }
    );
    cuda::set_rng_state(&generator(4, 4).get_state(), 0).unwrap();
    assert_eq!(g0.key(), Key { seed: 4, offset: 4 });
    let s = cuda::seed_all().unwrap();
    assert_eq!(cuda::initial_seed().unwrap(), s);
    let s0 = cuda::seed().unwrap();
    assert_eq!(g0.initial_seed(), s0);
}

#[test]
fn fork_rng_restores_after_ok_err_and_panic() {
    test_support::own_process!(fork_rng_restores_after_ok_err_and_panic);
    let _guard = lock();
    manual_seed(21);
    draw_default();
    let before = default_generator(Device::Cpu).unwrap().key();
    let expected_next = values::<f32>(
        &rand(
            &[6],
            DType::F32,
            Device::Cpu,
            Some(&generator(before.seed, before.offset)),
        )
        .unwrap(),
    );

    let inside = fork_rng(&[Device::Cpu, Device::Cpu], || {
        manual_seed(999);
        draw_default()
    })
    .unwrap();
    assert_ne!(inside, expected_next);
    assert_eq!(
        default_generator(Device::Cpu).unwrap().key(),
        before,
        "after Ok"
    );

    let result: Result<Result<(), String>, RngError> = fork_rng(&[Device::Cpu], || {
        draw_default();
        Err("boom".to_string())
    });
    assert_eq!(result.unwrap(), Err("boom".to_string()));
    assert_eq!(
        default_generator(Device::Cpu).unwrap().key(),
        before,
        "after Err"
    );

    let panicked = catch_unwind(AssertUnwindSafe(|| {
        fork_rng(&[Device::Cpu], || {
            draw_default();
            panic!("inside fork_rng");
        })
    }));
    let payload = panicked.unwrap_err();
    assert_eq!(
        payload.downcast_ref::<&str>(),
        Some(&"inside fork_rng"),
        "panic re-raised unchanged"
    );
    assert_eq!(
        default_generator(Device::Cpu).unwrap().key(),
        before,
        "after panic"
    );

    // Not listed, not restored.
    fork_rng(&[], draw_default).unwrap();
    assert_ne!(default_generator(Device::Cpu).unwrap().key(), before);

    // A missing device fails before running the closure.
    let mut ran = false;
    let err = fork_rng(&[Device::Cpu, Device::Cuda(gpus())], || ran = true).unwrap_err();
    assert!(matches!(err, RngError::NoSuchDevice { .. }));
    assert!(!ran);
}
