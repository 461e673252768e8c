//! The training loop resumed at every step gives bit-identical losses and parameters.

use nn_mini::train::{Run, RunConfig, TrainConfig, Trainer, TrainingRun};
use nn_mini::{Checkpoint, CheckpointError, LoaderState, Module, NnError};
use tensor_core::Device;

const STEPS: u64 = 12;

/// A tiny run: 50 samples in batches of 8 is 7 batches per epoch (the last one of 2),
/// so 12 steps cross an epoch boundary and most resumes land mid-epoch.
fn config() -> TrainConfig {
    TrainConfig {
        seed: 42,
        dropout: 0.2,
        lr: 0.1,
        weight_decay: 1e-3,
        ..TrainConfig::mlp(vec![6, 16, 12, 4], 50, 8)
    }
}

/// Every parameter as bits.
fn param_bits(trainer: &Trainer) -> Vec<Vec<u32>> {
    trainer
        .model()
        .parameters()
        .iter()
        .map(|p| {
            p.value
                .to_vec::<f32>()
                .unwrap()
                .into_iter()
                .map(f32::to_bits)
                .collect()
        })
        .collect()
}

fn loss_bits(losses: &[f32]) -> Vec<u32> {
    losses.iter().map(|l| l.to_bits()).collect()
}

/// The uninterrupted run: losses, and parameters after every step.
fn reference() -> (Vec<f32>, Vec<Vec<Vec<u32>>>) {
    let mut trainer = Trainer::new(config()).unwrap();
    let mut params = vec![param_bits(&trainer)];
    for _ in 0..STEPS {
        trainer.step().unwrap();
        params.push(param_bits(&trainer));
    }
    (trainer.losses().to_vec(), params)
}

#[test]
fn resuming_at_every_step_is_bit_identical() {
    let (losses, params) = reference();
    assert!(losses.iter().all(|l| l.is_finite()));
    let dir = tempfile::tempdir().unwrap();
    for k in 0..=STEPS {
        // Train k steps with some worker count, save, and drop everything.
        let mut first = Trainer::new(TrainConfig {
            num_workers: (k % 3) as usize,
            ..config()
        })
        .unwrap();
        for _ in 0..k {
            first.step().unwrap();
        }
        let path = dir.path().join(format!("step{k}.safetensors"));
        first.save(&path).unwrap();
        let loader_state = first.loader().state().unwrap();
        let dropout_key = first.dropout_generator().key();
        drop(first);

        // A fresh trainer from the file, with another worker count, finishes the run.
        let mut resumed = Trainer::resume(&path, Some(((k + 1) % 4) as usize), None).unwrap();
        assert_eq!(resumed.step_count(), k);
        assert_eq!(resumed.loader().state().unwrap(), loader_state);
        assert_eq!(resumed.dropout_generator().key(), dropout_key);
        assert_eq!(
            param_bits(&resumed),
            params[k as usize],
            "parameters after loading step {k}"
        );
        for step in k..STEPS {
            resumed.step().unwrap();
            assert_eq!(
                param_bits(&resumed),
                params[step as usize + 1],
                "parameters after step {} (resumed at {k})",
                step + 1
            );
        }
        assert_eq!(
            loss_bits(resumed.losses()),
            loss_bits(&losses),
            "loss history resumed at {k}"
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_run_for_any_worker_count() {
    let (losses, _) = reference();
    for workers in [1, 3] {
        let mut t = Trainer::new(TrainConfig {
            num_workers: workers,
            ..config()
        })
        .unwrap();
        for _ in 0..STEPS {
            t.step().unwrap();
        }
        assert_eq!(
            loss_bits(t.losses()),
            loss_bits(&losses),
            "{workers} workers"
        );
    }
    let mut other_seed = Trainer::new(TrainConfig {
        seed: 43,
        ..config()
    })
    .unwrap();
    other_seed.step().unwrap();
    assert_ne!(other_seed.losses()[0].to_bits(), losses[0].to_bits());
}

/// Resumes at step 5 from `ck` after `tamper` edits it; returns the losses of steps 6
/// and 7 as bits (momentum only shows in step 7: a step's loss is computed before its
/// update).
fn resume_losses_after(ck: &Checkpoint, tamper: impl FnOnce(&mut Checkpoint)) -> Vec<u32> {
    let mut ck = ck.clone();
    tamper(&mut ck);
    let mut t = Trainer::from_checkpoint(&ck, None, None).unwrap();
    t.step().unwrap();
    t.step().unwrap();
    loss_bits(&t.losses()[5..7])
}

#[test]
fn each_restored_piece_matters() {
    let (losses, _) = reference();
    let mut t = Trainer::new(config()).unwrap();
    for _ in 0..5 {
        t.step().unwrap();
    }
    let ck = t.checkpoint().unwrap();
    let expected = loss_bits(&losses[5..7]);
    assert_eq!(resume_losses_after(&ck, |_| {}), expected);

    // Shuffle is on: a loader restarted from the seed instead of the saved position
    // (epoch 0, batch 0 rather than epoch 0, batch 5) would train on other samples; the
    // resume cross-checks the position against the step and refuses it.
    let mut restarted = ck.clone();
    let saved = restarted.loader_state("loader.state").unwrap();
    let restart = LoaderState {
        epoch: 0,
        position: 0,
        ..saved
    };
    restarted
        .insert_bytes("loader.state", &restart.to_bytes())
        .unwrap();
    let err = Trainer::from_checkpoint(&restarted, None, None).unwrap_err();
    assert!(
        matches!(&err, NnError::Checkpoint(CheckpointError::Inconsistent { name, .. }) if name == "loader.state"),
        "{err}"
    );

    // The dropout generator restarted from its seed draws other masks.
    let fresh = Trainer::new(config()).unwrap();
    let forget_dropout = |ck: &mut Checkpoint| {
        ck.insert_bytes("rng.dropout", &fresh.dropout_generator().get_state())
            .unwrap();
    };
    assert_ne!(resume_losses_after(&ck, forget_dropout), expected);

    // Without momentum buffers the first resumed step would be a plain SGD step; the
    // resume knows every parameter has one after step 5 and refuses.
    let mut forgot = ck.clone();
    forgot.set_metadata("optim.momentum_buffers", "[]").unwrap();
    let err = Trainer::from_checkpoint(&forgot, None, None).unwrap_err();
    assert!(
        matches!(&err, NnError::Checkpoint(CheckpointError::Inconsistent { name, .. }) if name == "optim.momentum_buffers"),
        "{err}"
    );
}

#[test]
fn bad_checkpoints_fail_with_their_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ck.safetensors");
    let mut t = Trainer::new(config()).unwrap();
    t.step().unwrap();
    t.save(&path).unwrap();
    let good = std::fs::read(&path).unwrap();

    std::fs::write(&path, &good[..good.len() / 2]).unwrap();
    let err = Trainer::resume(&path, None, None).unwrap_err();
    assert!(
        matches!(err, NnError::Checkpoint(CheckpointError::Truncated { .. })),
        "{err}"
    );

    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x10;
    std::fs::write(&path, &flipped).unwrap();
    let err = Trainer::resume(&path, None, None).unwrap_err();
    assert!(
        matches!(
            err,
            NnError::Checkpoint(CheckpointError::ChecksumMismatch { .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("corrupted"));

    // A checkpoint of a different model shape.
    let mut wide = Trainer::new(TrainConfig {
        layers: vec![6, 17, 12, 4],
        ..config()
    })
    .unwrap()
    .checkpoint()
    .unwrap();
    wide.set_metadata("train.config", config().to_json())
        .unwrap();
    let err = Trainer::from_checkpoint(&wide, None, None).unwrap_err();
    assert!(
        matches!(err, NnError::Checkpoint(CheckpointError::ShapeMismatch { ref name, .. }) if name == "model.0.weight"),
        "{err}"
    );

    // No loader state at all.
    let ck = Checkpoint::from_bytes(&good).unwrap();
    let mut partial = Checkpoint::new();
    for name in ck.names().filter(|n| *n != "loader.state") {
        partial.insert(name, ck.tensor(name).unwrap()).unwrap();
    }
    for key in ["train.config", "optim.momentum_buffers"] {
        partial
            .set_metadata(key, ck.metadata(key).unwrap())
            .unwrap();
    }
    let err = Trainer::from_checkpoint(&partial, None, None).unwrap_err();
    assert!(
        matches!(err, NnError::Checkpoint(CheckpointError::MissingTensor { ref name }) if name == "loader.state"),
        "{err}"
    );
}

#[test]
fn a_missing_gpu_is_an_error() {
    let err = Trainer::new(TrainConfig {
        device: Device::Cuda(0),
        ..config()
    })
    .unwrap_err();
    assert!(!err.to_string().is_empty());
}
