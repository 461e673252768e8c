//! The demo's training run under portable arithmetic (docs/contract.md §14): the same
//! loss bits on the CPU with 1 and 2 threads and on both CUDA devices, and a run saved on
//! one device resumes on another with the same remaining curve. Without portable
//! arithmetic the CUDA run must differ from the CPU's somewhere (on the stand-in, which
//! rounds cuBLAS and libdevice like a GPU), so the comparison can fail.
//!
//! The switch is process-wide, so it is flipped in one test only, in a process of
//! its own (`own_process!`).
use crate::support;

use ditto::nn_mini::train::{Run, TrainConfig, Trainer, TrainingRun};
use ditto::tensor_core::{use_portable_arithmetic, Device};
use support::{gpus, on_standin};
use test_support::on_threads;

const STEPS: u64 = 16;
const SAVE_AT: u64 = 7;

/// The demo's MLP and data (`TrainConfig::default()`), a short run.
fn config(device: Device) -> TrainConfig {
    TrainConfig {
        seed: 7,
        device,
        ..TrainConfig::default()
    }
}

fn bits(losses: &[f32]) -> Vec<u32> {
    losses.iter().map(|v| v.to_bits()).collect()
}

/// `STEPS` losses of a fresh run on `device`, in a rayon pool of `threads`.
fn straight(device: Device, threads: usize) -> Vec<u32> {
    on_threads(threads, || {
        let mut trainer = Trainer::new(config(device)).unwrap();
        while trainer.step_count() < STEPS {
            trainer.step().unwrap();
        }
        bits(trainer.losses())
    })
}

/// A run started on `from`, saved after `SAVE_AT` steps, resumed on `to`: all its losses.
fn moved(from: Device, to: Device, dir: &std::path::Path) -> Vec<u32> {
    let path = dir.join(format!("{from}-{to}.safetensors").replace(':', ""));
    let mut first = Trainer::new(config(from)).unwrap();
    while first.step_count() < SAVE_AT {
        first.step().unwrap();
    }
    first.save(&path).unwrap();
    drop(first);
    let mut resumed = Trainer::resume(&path, None, Some(to)).unwrap();
    assert_eq!(resumed.config().device, to);
    while resumed.step_count() < STEPS {
        resumed.step().unwrap();
    }
    bits(resumed.losses())
}

#[test]
fn portable_runs_are_the_same_bytes_on_every_device_and_across_resumes() {
    test_support::own_process!(portable_runs_are_the_same_bytes_on_every_device_and_across_resumes);
    if !gpus(2) {
        return;
    }
    use_portable_arithmetic(true);
    let cpu = straight(Device::Cpu, 1);
    assert_eq!(straight(Device::Cpu, 2), cpu, "cpu, 2 threads");
    assert_eq!(straight(Device::Cuda(0), 1), cpu, "cuda:0");
    assert_eq!(straight(Device::Cuda(1), 1), cpu, "cuda:1");
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        moved(Device::Cuda(0), Device::Cpu, dir.path()),
        cpu,
        "cuda:0 -> cpu"
    );
    assert_eq!(
        moved(Device::Cpu, Device::Cuda(1), dir.path()),
        cpu,
        "cpu -> cuda:1"
    );
    assert_eq!(
        moved(Device::Cuda(1), Device::Cuda(0), dir.path()),
        cpu,
        "cuda:1 -> cuda:0"
    );

    use_portable_arithmetic(false);
    let (cpu, cuda) = (straight(Device::Cpu, 1), straight(Device::Cuda(0), 1));
    let differing = cpu.iter().zip(&cuda).filter(|(a, b)| a != b).count();
    println!("default arithmetic: {differing} of {STEPS} losses differ between cpu and cuda:0");
    if on_standin() {
        assert!(differing > 0, "the stand-in's default run equals the CPU's");
    }
}
