//! Several CUDA devices in one process: the seeding functions over all of them, the seed
//! scenario `set_rng_state_all(one state)` then the same ops on every device, states
//! moving between devices, `fork_rng`, tensors moving between devices, and typed errors
//! for a generator or tensor on the wrong device.
//!
//! PyTorch's scenario: `torch.cuda.set_rng_state_all([torch.cuda.get_rng_state()] * n)`
//! then `torch.rand` on every GPU. ditto's promise is stronger than PyTorch's: the
//! tensors are bit-identical on every device and on the CPU, whatever each device's SM
//! count (the CUDA stand-in's devices have 132 and 46, so their launch grids differ).
//!
//! Needs two CUDA devices; with fewer each test prints why it skipped, which is a
//! failure under `REQUIRE_GPUS=2` (CI, on the stand-in's devices).

use crate::support;

use std::sync::{Mutex, MutexGuard};

use ditto::kernels::{launch, Launch};
use ditto::rng_gen::{self, cuda as rng_cuda, Generator, RngError};
use ditto::tensor_core::cuda::{self, CudaStorage};
use ditto::tensor_core::{DType, Device, Tensor, TensorError};
use support::{assert_same, cpu_tensor, gpus};

const GPU0: Device = Device::Cuda(0);
const GPU1: Device = Device::Cuda(1);

/// The default generators are process-wide: tests that use them take turns.
fn default_generators() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Big enough that the automatic grid differs between a 132-SM and a 46-SM device
/// (1056 against 368 blocks of 256 threads), with a ragged tail.
const N: usize = (1 << 18) + 5;

/// The random ops of the scenario, each from `device`'s default generator (`None`).
fn draw(device: Device) -> Vec<Tensor> {
    let x = Tensor::ones(&[N], DType::F32, Device::Cpu)
        .unwrap()
        .to_device(device)
        .unwrap();
    let (dropped, _) = rng_gen::dropout(&x, 0.25, true, None).unwrap();
    vec![
        rng_gen::rand(&[N], DType::F32, device, None).unwrap(),
        rng_gen::randn(&[N], DType::F32, device, None).unwrap(),
        rng_gen::bernoulli(&[N], 0.3, DType::F32, device, None).unwrap(),
        dropped,
        rng_gen::randn(&[7, 3], DType::F16, device, None).unwrap(),
        rng_gen::rand(&[1001], DType::F64, device, None).unwrap(),
    ]
}

fn assert_all_same(what: &str, got: &[Tensor], want: &[Tensor]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_same(&format!("{what}: op {i}"), g, w);
    }
}

#[test]
fn manual_seed_all_and_the_state_functions_cover_every_device() {
    test_support::own_process!(manual_seed_all_and_the_state_functions_cover_every_device);
    if !gpus(2) {
        return;
    }
    let _turn = default_generators();
    rng_cuda::manual_seed_all(1234);
    let states = rng_cuda::get_rng_state_all();
    assert_eq!(states.len(), cuda::device_count());
    for (i, state) in states.iter().enumerate() {
        assert_eq!(state, &states[0], "device {i} after manual_seed_all");
        assert_eq!(rng_cuda::get_rng_state(i).unwrap(), *state);
    }
    let first: Vec<Vec<Tensor>> = [GPU0, GPU1].map(draw).into();
    // Every device moved; restoring all states replays every device.
    assert_ne!(rng_cuda::get_rng_state_all(), states);
    rng_cuda::set_rng_state_all(&states).unwrap();
    for (device, before) in [GPU0, GPU1].into_iter().zip(&first) {
        assert_all_same(&format!("{device} replayed"), &draw(device), before);
    }
    // Each device gets its own state back, not device 0's.
    let mut distinct = states.clone();
    let g = Generator::new(Device::Cpu);
    g.manual_seed(99);
    distinct[1] = g.get_state();
    rng_cuda::set_rng_state_all(&distinct).unwrap();
    assert_eq!(rng_cuda::get_rng_state(0).unwrap(), states[0]);
    assert_eq!(rng_cuda::get_rng_state(1).unwrap(), distinct[1]);
    assert_eq!(rng_cuda::get_rng_state_all(), distinct);
    // A bad state anywhere changes nothing anywhere.
    let mut bad = states.clone();
    bad[1] = vec![1, 2, 3];
    assert!(rng_cuda::set_rng_state_all(&bad).is_err());
    assert_eq!(rng_cuda::get_rng_state_all(), distinct);
}

#[test]
fn one_state_on_every_device_gives_the_same_tensors_as_the_cpu() {
    test_support::own_process!(one_state_on_every_device_gives_the_same_tensors_as_the_cpu);
    if !gpus(2) {
        return;
    }
    let _turn = default_generators();
    rng_gen::manual_seed(2026);
    // Move device 0 along first, so the state is not a fresh seed's.
    rng_gen::rand(&[33], DType::F32, GPU0, None).unwrap();
    let state = rng_cuda::get_rng_state(0).unwrap();
    rng_cuda::set_rng_state_all(&vec![state.clone(); cuda::device_count()]).unwrap();
    rng_gen::set_rng_state(&state).unwrap();
    let on_cpu = draw(Device::Cpu);
    assert_all_same("cuda:0 against the CPU", &draw(GPU0), &on_cpu);
    assert_all_same("cuda:1 against the CPU", &draw(GPU1), &on_cpu);
    assert_eq!(
        rng_cuda::get_rng_state(0).unwrap(),
        rng_cuda::get_rng_state(1).unwrap()
    );
    assert_eq!(
        rng_cuda::get_rng_state(1).unwrap(),
        rng_gen::get_rng_state()
    );
}

#[test]
fn a_state_taken_on_one_device_continues_on_the_other() {
    test_support::own_process!(a_state_taken_on_one_device_continues_on_the_other);
    if !gpus(2) {
        return;
    }
    let on0 = Generator::new(GPU0);
    on0.manual_seed(5);
    rng_gen::randn(&[1000], DType::F32, GPU0, Some(&on0)).unwrap();
    let state = on0.get_state();
    let next_on0 = rng_gen::rand(&[N], DType::F32, GPU0, Some(&on0)).unwrap();
    let on1 = Generator::new(GPU1);
    on1.set_state(&state).unwrap();
    let next_on1 = rng_gen::rand(&[N], DType::F32, GPU1, Some(&on1)).unwrap();
    assert_eq!(next_on1.device(), GPU1);
    assert_same("cuda:1 continuing cuda:0's state", &next_on1, &next_on0);
    assert_eq!(on1.key(), on0.key());
    // The same through the default generators.
    let _turn = default_generators();
    rng_cuda::set_rng_state(&state, 1).unwrap();
    let via_default = rng_gen::rand(&[N], DType::F32, GPU1, None).unwrap();
    assert_same("default generator of cuda:1", &via_default, &next_on0);
}

#[test]
fn seeding_or_drawing_on_one_device_leaves_the_other_alone() {
    test_support::own_process!(seeding_or_drawing_on_one_device_leaves_the_other_alone);
    if !gpus(2) {
        return;
    }
    let _turn = default_generators();
    rng_cuda::manual_seed_all(8);
    let other = rng_cuda::get_rng_state(1).unwrap();
    rng_cuda::manual_seed(77); // device 0 only
    assert_eq!(rng_cuda::get_rng_state(1).unwrap(), other);
    assert_ne!(rng_cuda::get_rng_state(0).unwrap(), other);
    rng_gen::randn(&[4096], DType::F32, GPU0, None).unwrap();
    let (_, _) = rng_gen::dropout(
        &cpu_tensor(&[64], 1).to_device(GPU0).unwrap(),
        0.5,
        true,
        None,
    )
    .unwrap();
    assert_eq!(rng_cuda::get_rng_state(1).unwrap(), other);
    let fresh = Generator::new(Device::Cpu);
    fresh.manual_seed(3);
    rng_cuda::set_rng_state(&fresh.get_state(), 0).unwrap();
    assert_eq!(rng_cuda::get_rng_state(1).unwrap(), other);
    rng_gen::rand(&[10], DType::F32, GPU1, None).unwrap();
    assert_eq!(rng_cuda::get_rng_state(0).unwrap(), fresh.get_state());
}

#[test]
fn fork_rng_over_both_devices_restores_both() {
    test_support::own_process!(fork_rng_over_both_devices_restores_both);
    if !gpus(2) {
        return;
    }
    let _turn = default_generators();
    rng_cuda::manual_seed_all(11);
    let before = rng_cuda::get_rng_state_all();
    let inside = rng_gen::fork_rng(&[GPU0, GPU1], || {
        let a = rng_gen::randn(&[N], DType::F32, GPU0, None).unwrap();
        let b = rng_gen::randn(&[N], DType::F32, GPU1, None).unwrap();
        assert_ne!(rng_cuda::get_rng_state_all(), before);
        (a, b)
    })
    .unwrap();
    assert_eq!(rng_cuda::get_rng_state_all(), before);
    // After the fork both devices draw what they drew inside it.
    assert_same(
        "cuda:0 after fork_rng",
        &rng_gen::randn(&[N], DType::F32, GPU0, None).unwrap(),
        &inside.0,
    );
    assert_same(
        "cuda:1 after fork_rng",
        &rng_gen::randn(&[N], DType::F32, GPU1, None).unwrap(),
        &inside.1,
    );
    // Forking one device leaves the other's draws visible.
    rng_cuda::set_rng_state_all(&before).unwrap();
    rng_gen::fork_rng(&[GPU0], || {
        rng_gen::rand(&[9], DType::F32, GPU1, None).unwrap()
    })
    .unwrap();
    assert_eq!(rng_cuda::get_rng_state(0).unwrap(), before[0]);
    assert_ne!(rng_cuda::get_rng_state(1).unwrap(), before[1]);
    // A device that does not exist is refused before anything runs.
    let missing = Device::Cuda(cuda::device_count());
    let mut ran = false;
    assert!(matches!(
        rng_gen::fork_rng(&[GPU0, missing], || ran = true),
        Err(RngError::NoSuchDevice { .. })
    ));
    assert!(!ran);
}

#[test]
fn tensors_move_between_both_devices_and_the_cpu_unchanged() {
    test_support::own_process!(tensors_move_between_both_devices_and_the_cpu_unchanged);
    if !gpus(2) {
        return;
    }
    let base = cpu_tensor(&[5, 7], 3);
    for dtype in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::U8,
        DType::Bool,
    ] {
        let t = base.to_dtype(dtype).unwrap();
        let on0 = t.to_device(GPU0).unwrap();
        let on1 = on0.to_device(GPU1).unwrap();
        assert_eq!(on1.device(), GPU1);
        assert_same(&format!("{dtype} cpu -> cuda:0 -> cuda:1"), &on1, &t);
        let back = on1.to_device(GPU0).unwrap().to_device(Device::Cpu).unwrap();
        assert_same(&format!("{dtype} -> cuda:0 -> cpu"), &back, &t);
    }
    // Views move as their elements; ops on cuda:1 use what came from cuda:0.
    let on0 = base.to_device(GPU0).unwrap();
    let view = on0.t().unwrap().narrow(0, 2, 3).unwrap();
    let moved = view.to_device(GPU1).unwrap();
    let want = base.t().unwrap().narrow(0, 2, 3).unwrap();
    assert_same("a strided view cuda:0 -> cuda:1", &moved, &want);
    let rhs = cpu_tensor(&[5, 4], 9);
    for device in [GPU0, GPU1, GPU0] {
        // Alternating devices on one thread: each op must run on its own device.
        let x = base.to_device(device).unwrap();
        let sum = x.add(&x).unwrap().sum_all().unwrap();
        assert_same(
            &format!("sum on {device}"),
            &sum,
            &base.add(&base).unwrap().sum_all().unwrap(),
        );
        let product = x
            .t()
            .unwrap()
            .matmul(&rhs.to_device(device).unwrap())
            .unwrap();
        assert_eq!(product.device(), device);
        let cpu = base
            .t()
            .unwrap()
            .matmul(&rhs)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        for (g, c) in product.to_vec::<f32>().unwrap().iter().zip(&cpu) {
            assert!(
                (g - c).abs() <= 1e-5 * c.abs().max(1.0),
                "matmul on {device}: {g} vs {c}"
            );
        }
    }
}

#[test]
fn a_generator_or_tensor_on_the_wrong_device_is_a_typed_error() {
    test_support::own_process!(a_generator_or_tensor_on_the_wrong_device_is_a_typed_error);
    if !gpus(2) {
        return;
    }
    let g0 = Generator::new(GPU0);
    let before = g0.key();
    for result in [
        rng_gen::rand(&[8], DType::F32, GPU1, Some(&g0)),
        rng_gen::randn(&[8], DType::F32, Device::Cpu, Some(&g0)),
        rng_gen::bernoulli(&[8], 0.5, DType::F32, GPU1, Some(&g0)),
    ] {
        assert!(
            matches!(
                result,
                Err(RngError::GeneratorDeviceMismatch {
                    generator: GPU0,
                    ..
                })
            ),
            "{result:?}"
        );
    }
    let x1 = Tensor::ones(&[8], DType::F32, GPU1).unwrap();
    assert!(matches!(
        rng_gen::dropout(&x1, 0.5, true, Some(&g0)),
        Err(RngError::GeneratorDeviceMismatch { .. })
    ));
    assert_eq!(g0.key(), before, "a refused op must not move the generator");
    // Tensors of two devices in one op.
    let x0 = Tensor::ones(&[8], DType::F32, GPU0).unwrap();
    for result in [
        x0.add(&x1),
        x0.mul(&x1),
        x0.reshape(&[1, 8])
            .unwrap()
            .matmul(&x1.reshape(&[8, 1]).unwrap()),
    ] {
        assert!(
            matches!(result, Err(TensorError::DeviceMismatch { .. })),
            "{result:?}"
        );
    }
    // The launchers check their buffers' devices too.
    let src = CudaStorage::alloc(0, DType::F32, 64).unwrap();
    let mut dst = CudaStorage::alloc(1, DType::F32, 64).unwrap();
    let err = launch::dropout(&src, &mut dst, None, 1, 0, 0.5, 2.0, Launch::Auto);
    assert!(
        err.is_err(),
        "dropout from cuda:0 into cuda:1 must be refused"
    );
    let mut grad_in = CudaStorage::alloc(0, DType::F32, 64).unwrap();
    let keep = launch::KeepSource::Regenerate { seed: 1, offset: 0 };
    let err = launch::dropout_backward(&dst, &mut grad_in, keep, 0.5, 2.0, Launch::Auto);
    assert!(
        err.is_err(),
        "a gradient on cuda:1 into cuda:0 must be refused"
    );
}
