//! nn-mini under the deterministic-algorithms switch (process-wide, so one test): the
//! Embedding's fast backward is refused in `Error` mode with the typed error, its
//! default runs; and the training loop, loader workers included, gives the same curve
//! in `Error` mode as in `Off` mode, straight and resumed from a checkpoint.

use crate::support;

use nn_mini::train::{Run, TrainConfig, Trainer, TrainingRun};
use nn_mini::{Embedding, Module, NnError};
use tensor_core::{
    use_deterministic_algorithms, Algorithm, DType, DeterministicMode, Device, Tensor, TensorError,
};

use support::grad_values;

fn config() -> TrainConfig {
    TrainConfig {
        seed: 3,
        lr: 0.1,
        num_workers: 2,
        ..TrainConfig::mlp(vec![8, 32, 4], 100, 16)
    }
}

fn bits(losses: &[f32]) -> Vec<u32> {
    losses.iter().map(|l| l.to_bits()).collect()
}

/// 12 steps straight, and 12 steps with a checkpoint written and resumed after step 5.
fn straight_and_resumed() -> (Vec<u32>, Vec<u32>) {
    let mut straight = Trainer::new(config()).unwrap();
    for _ in 0..12 {
        straight.step().unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ck.safetensors");
    let mut first = Trainer::new(config()).unwrap();
    for _ in 0..5 {
        first.step().unwrap();
    }
    first.save(&path).unwrap();
    let mut resumed = Trainer::resume(&path, Some(1), None).unwrap();
    while resumed.step_count() < 12 {
        resumed.step().unwrap();
    }
    (bits(straight.losses()), bits(resumed.losses()))
}

#[test]
fn error_mode_refuses_fast_paths_and_keeps_training_curves() {
    test_support::own_process!(error_mode_refuses_fast_paths_and_keeps_training_curves);
    let (off_straight, off_resumed) = straight_and_resumed();
    assert_eq!(off_straight, off_resumed);

    use_deterministic_algorithms(DeterministicMode::Error);
    let (straight, resumed) = straight_and_resumed();
    assert_eq!(straight, off_straight, "Error mode changed the curve");
    assert_eq!(
        resumed, off_straight,
        "the resumed run differs in Error mode"
    );

    // The embedding's planted fast backward: the typed error, naming op and device.
    let weight = Tensor::zeros(&[4, 2], DType::F32, Device::Cpu).unwrap();
    let tokens = Tensor::from_slice(&[1i64, 3, 1], &[3], Device::Cpu).unwrap();
    let grad = Tensor::ones(&[3, 2], DType::F32, Device::Cpu).unwrap();
    let mut fast = Embedding::from_weight(weight.clone())
        .unwrap()
        .with_algorithm(Algorithm::Fast);
    fast.forward(&tokens, true).unwrap();
    let err = fast.backward_params(&grad).unwrap_err();
    assert!(
        matches!(
            err,
            NnError::Tensor(TensorError::NondeterministicOp {
                op: "index_add",
                device: Device::Cpu,
                ..
            })
        ),
        "{err}"
    );
    let mut default = Embedding::from_weight(weight).unwrap();
    default.forward(&tokens, true).unwrap();
    default.backward_params(&grad).unwrap();
    let got = grad_values(default.weight());
    assert_eq!(got, [0.0, 0.0, 2.0, 2.0, 0.0, 0.0, 1.0, 1.0]);
    use_deterministic_algorithms(DeterministicMode::Off);
}
