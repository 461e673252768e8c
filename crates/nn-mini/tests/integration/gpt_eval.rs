//! nanoGPT's held-out evaluation and bias-free layers (issue 42): the validation bytes
//! are never trained on, evaluating never changes the training curve, an evaluation at
//! a step is the same straight or resumed, and a model without biases has nanoGPT's
//! `bias=False` parameters.

use std::path::Path;

use nn_mini::gpt::{
    estimate_loss, read_text, DataSpec, GptConfig, GptTrainConfig, GptTrainer, Split, Text,
    TextWindows,
};
use nn_mini::train::{Run, RunConfig, TrainingRun};
use nn_mini::Module;

/// A text whose first `train` bytes are lowercase words and whose rest is digits, so
/// a window's bytes tell which split it came from.
fn write_text(dir: &Path, train: usize, val: usize) -> DataSpec {
    let words = b"the quick brown fox jumps over the lazy dog and then she said ";
    let mut bytes: Vec<u8> = words.iter().copied().cycle().take(train).collect();
    bytes.extend(b"0123456789".iter().copied().cycle().take(val));
    let path = dir.join("text.txt");
    std::fs::write(&path, &bytes).unwrap();
    DataSpec::of(&path, &Text::from_bytes(bytes))
}

/// [`GptTrainConfig::tiny`] holding out the last 20% of a 1,000-byte text.
fn config(dir: &Path) -> GptTrainConfig {
    GptTrainConfig {
        seed: 3,
        val_fraction: 0.2,
        ..GptTrainConfig::tiny(write_text(dir, 800, 200))
    }
}

#[test]
fn the_split_is_nanogpts_and_training_windows_stay_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    assert_eq!(config.train_bytes(), 800, "int(1000 * 0.8)");
    assert_eq!(config.split_range(Split::Val), 800..1000);
    let mut fresh = config.clone().build(None).unwrap();
    for _ in 0..50 {
        let batch = fresh.state.loader_mut().next_batch().unwrap();
        let bytes = batch.target.to_vec::<i64>().unwrap();
        assert!(
            bytes.iter().all(|&b| !(b as u8).is_ascii_digit()),
            "a training window reached the held-out digits: {bytes:?}"
        );
    }
    let text = read_text(&config).unwrap();
    let val = TextWindows::within(text, config.split_range(Split::Val), 8, 4).unwrap();
    assert!(TextWindows::within(Text::from_bytes(vec![1; 10]), 4..12, 2, 1).is_err());
    assert_eq!(val.context(), 8);
}

#[test]
fn evaluating_never_changes_the_training_curve_and_resumes_alike() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let text = read_text(&config).unwrap();
    const STEPS: u64 = 6;
    let mut plain = GptTrainer::new(config.clone()).unwrap();
    while plain.step_count() < STEPS {
        plain.step().unwrap();
    }
    let mut evaluated = GptTrainer::new(config.clone()).unwrap();
    let mut at_four = None;
    while evaluated.step_count() < STEPS {
        evaluated.step().unwrap();
        let step = evaluated.step_count();
        let train = estimate_loss(evaluated.model_mut(), &config, &text, Split::Train, 2, step);
        let val = estimate_loss(evaluated.model_mut(), &config, &text, Split::Val, 2, step);
        let (train, val) = (train.unwrap(), val.unwrap());
        assert!(train.is_finite() && val.is_finite() && train != val);
        if step == 4 {
            at_four = Some(val);
            evaluated.save(dir.path().join("k4.safetensors")).unwrap();
        }
    }
    let bits = |l: &[f32]| l.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(evaluated.losses()), bits(plain.losses()));
    let mut resumed = GptTrainer::resume(dir.path().join("k4.safetensors"), None, None).unwrap();
    let again = estimate_loss(resumed.model_mut(), &config, &text, Split::Val, 2, 4).unwrap();
    assert_eq!(again.to_bits(), at_four.unwrap().to_bits());
    // Another step's batches are other windows.
    let later = estimate_loss(resumed.model_mut(), &config, &text, Split::Val, 2, 5).unwrap();
    assert_ne!(later.to_bits(), again.to_bits());
}

#[test]
fn bad_splits_are_refused_before_training() {
    let dir = tempfile::tempdir().unwrap();
    let base = config(dir.path());
    for (val_fraction, expected) in [
        (1.0, "val_fraction must be in [0, 1)"),
        (-0.1, "val_fraction must be in [0, 1)"),
        (0.02, "fewer than one batch"),
    ] {
        let config = GptTrainConfig {
            val_fraction,
            ..base.clone()
        };
        let err = GptTrainer::new(config).unwrap_err().to_string();
        assert!(err.contains(expected), "{val_fraction}: {err}");
    }
    let whole = GptTrainConfig {
        val_fraction: 0.0,
        ..base
    };
    let text = read_text(&whole).unwrap();
    let mut trainer = GptTrainer::new(whole.clone()).unwrap();
    let err = estimate_loss(trainer.model_mut(), &whole, &text, Split::Val, 1, 0).unwrap_err();
    assert!(err.to_string().contains("is val_fraction 0?"), "{err}");
}

#[test]
fn a_model_without_biases_has_nanogpts_bias_false_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let base = config(dir.path());
    let config = GptTrainConfig {
        model: GptConfig {
            bias: false,
            ..base.model
        },
        ..base
    };
    let mut trainer = GptTrainer::new(config.clone()).unwrap();
    let names: Vec<(String, Vec<usize>)> = trainer
        .model()
        .named_parameters()
        .into_iter()
        .map(|(name, p)| (name, p.value.dims().to_vec()))
        .collect();
    assert_eq!(names, config.model.parameter_shapes());
    assert!(names.iter().all(|(name, _)| !name.ends_with(".bias")));
    let count: usize = names.iter().map(|(_, d)| d.iter().product::<usize>()).sum();
    assert_eq!(Some(count as u64), config.model.parameter_count());
    while trainer.step_count() < 3 {
        trainer.step().unwrap();
    }
    let path = dir.path().join("nobias.safetensors");
    trainer.save(&path).unwrap();
    let resumed = GptTrainer::resume(&path, None, None).unwrap();
    assert!(!resumed.config().model.bias);
}
