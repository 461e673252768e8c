//! The training loop on a CUDA GPU: a save-and-resume run gives bit-identical losses and
//! parameters, like on the CPU, and the losses follow the CPU run's closely (cuBLAS and
//! libdevice round differently from gemm and libm, so not bit for bit).
//!
//! A real test whenever a GPU (and NVRTC) is present; otherwise it prints why it
//! skipped, and `REQUIRE_GPU=1` turns the skip into a failure.

mod support;

use ditto::nn_mini::train::{TrainConfig, Trainer};
use ditto::nn_mini::Module;
use ditto::tensor_core::Device;
use support::gpu;

const STEPS: u64 = 12;

fn config(device: Device) -> TrainConfig {
    TrainConfig {
        seed: 42,
        batch_size: 8,
        dataset_size: 50,
        layers: vec![6, 16, 12, 4],
        dropout: 0.2,
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 1e-3,
        num_workers: 0,
        device,
    }
}

fn param_bits(trainer: &Trainer) -> Vec<Vec<u32>> {
    trainer
        .model()
        .parameters()
        .iter()
        .map(|p| {
            assert_eq!(p.value.device(), Device::Cuda(0), "{} left the GPU", p.name);
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
