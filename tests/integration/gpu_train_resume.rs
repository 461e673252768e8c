//! The training loop on a CUDA GPU: a save-and-resume run gives bit-identical losses and
//! parameters, like on the CPU, and the losses follow the CPU run's closely (cuBLAS and
//! libdevice round differently from gemm and libm, so not bit for bit).
//!
//! A real test whenever a GPU (and NVRTC) is present; otherwise it prints why it
//! skipped, and `REQUIRE_GPU=1` turns the skip into a failure.

use crate::support;

use ditto::nn_mini::train::{Run, TrainConfig, Trainer, TrainingRun};
use ditto::nn_mini::Module;
use ditto::tensor_core::Device;
use support::{gpu, gpus};

const STEPS: u64 = 12;

/// A CUDA graph capture claims its device (work from other threads is refused while it
/// lasts: it would land in the graph), so the tests of this file take turns.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn config(device: Device) -> TrainConfig {
    TrainConfig {
        seed: 42,
        batch_size: 8,
        dataset_size: 50,
        layers: vec![6, 16, 12, 4],
        dropout: 0.2,
        lr: 0.1,
        weight_decay: 1e-3,
        device,
        ..TrainConfig::default()
    }
}

fn param_bits(trainer: &Trainer) -> Vec<Vec<u32>> {
    trainer
        .model()
        .parameters()
        .iter()
        .map(|p| {
            let device = trainer.config().device;
            assert_eq!(p.value.device(), device, "{} left the GPU", p.name);
            let values = p.value.to_vec::<f32>().unwrap();
            values.into_iter().map(f32::to_bits).collect()
        })
        .collect()
}

#[test]
fn a_cuda_run_resumes_bit_identically() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let mut straight = Trainer::new(config(Device::Cuda(0))).unwrap();
    for _ in 0..STEPS {
        straight.step().unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    for k in [1, 5, 7] {
        let mut first = Trainer::new(config(Device::Cuda(0))).unwrap();
        for _ in 0..k {
            first.step().unwrap();
        }
        let path = dir.path().join(format!("cuda{k}.safetensors"));
        first.save(&path).unwrap();
        drop(first);
        let mut resumed = Trainer::resume(&path, Some(k as usize % 3), None).unwrap();
        assert_eq!(resumed.config().device, Device::Cuda(0));
        while resumed.step_count() < STEPS {
            resumed.step().unwrap();
        }
        let bits = |l: &[f32]| l.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(resumed.losses()),
            bits(straight.losses()),
            "resumed at {k}"
        );
        assert_eq!(
            param_bits(&resumed),
            param_bits(&straight),
            "resumed at {k}"
        );
    }

    let mut cpu = Trainer::new(config(Device::Cpu)).unwrap();
    for _ in 0..STEPS {
        cpu.step().unwrap();
    }
    for (step, (c, g)) in cpu.losses().iter().zip(straight.losses()).enumerate() {
        assert!(
            (c - g).abs() <= 1e-4 * c.abs().max(1.0),
            "step {}: cpu loss {c} vs cuda {g}",
            step + 1
        );
    }
}

/// `steps` steps of a fresh run on `device`, eagerly or as replayed CUDA graphs.
fn trained(device: Device, graphed: bool, steps: u64) -> Trainer {
    let mut trainer = Trainer::new(config(device)).unwrap();
    trainer.set_cuda_graph(graphed).unwrap();
    while trainer.step_count() < steps {
        trainer.step().unwrap();
    }
    trainer
}

#[test]
fn a_graphed_cuda_run_is_the_eager_run_and_resumes_either_way() {
    if !gpu() {
        return;
    }
    let _turn = serial();
    let bits = |l: &[f32]| l.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    // 50 samples in batches of 8: every epoch ends with a batch of 2, its own graph.
    let devices: &[Device] = if gpus(2) {
        &[Device::Cuda(0), Device::Cuda(1)]
    } else {
        &[Device::Cuda(0)]
    };
    for &device in devices {
        let eager = trained(device, false, STEPS);
        let graphed = trained(device, true, STEPS);
        assert_eq!(bits(graphed.losses()), bits(eager.losses()), "{device}");
        assert_eq!(param_bits(&graphed), param_bits(&eager), "{device}");

        // Saved between replays, resumed graphed and eagerly.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("graphed.safetensors");
        trained(device, true, 9).save(&path).unwrap();
        for resume_graphed in [true, false] {
            let mut resumed = Trainer::resume(&path, None, None).unwrap();
            resumed.set_cuda_graph(resume_graphed).unwrap();
            while resumed.step_count() < STEPS {
                resumed.step().unwrap();
            }
            let what = format!("{device}, resumed graphed: {resume_graphed}");
            assert_eq!(bits(resumed.losses()), bits(eager.losses()), "{what}");
            assert_eq!(param_bits(&resumed), param_bits(&eager), "{what}");
        }
    }
    let mut cpu = Trainer::new(config(Device::Cpu)).unwrap();
    assert!(
        cpu.set_cuda_graph(true).is_err(),
        "a CPU run has no CUDA graphs"
    );
}
