//! The GPT run keeps the MLP run's promises (issue 30): a resume at any step continues
//! the straight run bit for bit, the loader's worker count and the thread count change
//! nothing, and bad input is a typed error naming what was wrong.

use std::path::Path;

use nn_mini::gpt::{DataSpec, GptConfig, GptTrainConfig, GptTrainer, Precision, Text};
use nn_mini::train::{Run, TrainConfig, Trainer, TrainingRun};
use nn_mini::{AdamW, AdamWConfig, Checkpoint, CheckpointError, Module, NnError, Optimizer};
use test_support::on_threads;

/// A text of `len` bytes of English-like words, written to `dir/name`.
fn write_text(dir: &Path, name: &str, len: usize) -> DataSpec {
    let path = dir.join(name);
    let words = b"the quick brown fox jumps over the lazy dog and then she said that it was ";
    let bytes: Vec<u8> = words.iter().copied().cycle().take(len).collect();
    std::fs::write(&path, &bytes).unwrap();
    DataSpec::of(&path, &Text::from_bytes(bytes))
}

/// [`GptTrainConfig::tiny`] (small enough for debug builds; dropout on, so resumes must
/// replay masks) with seed 5.
fn tiny(data: DataSpec) -> GptTrainConfig {
    GptTrainConfig {
        seed: 5,
        ..GptTrainConfig::tiny(data)
    }
}

/// The losses and final parameters of `steps` steps.
fn run(config: &GptTrainConfig, steps: u64) -> (Vec<f32>, Vec<Vec<f32>>) {
    let mut trainer = GptTrainer::new(config.clone()).unwrap();
    while trainer.step_count() < steps {
        trainer.step().unwrap();
    }
    (trainer.losses().to_vec(), parameters(trainer.model()))
}

fn parameters(model: &dyn Module) -> Vec<Vec<f32>> {
    model
        .parameters()
        .iter()
        .map(|p| p.value.to_vec::<f32>().unwrap())
        .collect()
}

#[test]
fn a_resume_at_any_step_continues_the_straight_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = tiny(write_text(dir.path(), "text.txt", 700));
    const STEPS: u64 = 10;
    let (straight, final_params) = run(&config, STEPS);
    assert!(straight.iter().all(|l| l.is_finite()));
    // 700 bytes make 84 windows of 8, 21 batches of 4: the resumes below fall mid-epoch.
    for k in 1..STEPS {
        let mut first = GptTrainer::new(config.clone()).unwrap();
        while first.step_count() < k {
            first.step().unwrap();
        }
        let path = dir.path().join(format!("k{k}.safetensors"));
        first.save(&path).unwrap();
        drop(first);
        let mut resumed = GptTrainer::resume(&path, None, None).unwrap();
        assert_eq!(resumed.step_count(), k);
        while resumed.step_count() < STEPS {
            resumed.step().unwrap();
        }
        assert_eq!(resumed.losses(), &straight[..], "resumed after step {k}");
        assert_eq!(
            parameters(resumed.model()),
            final_params,
            "resumed after step {k}"
        );
    }
}

/// `--precision bf16` (issue 43): the checkpoint records it, a resume continues in it
/// bit for bit, the thread count changes nothing, and it is not the f32 run. An f32
/// checkpoint does not name a precision, so its bytes are what earlier builds wrote.
#[test]
fn a_bf16_run_records_its_precision_and_resumes_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let f32_config = tiny(write_text(dir.path(), "text.txt", 700));
    let config = GptTrainConfig {
        model: GptConfig {
            precision: Precision::Bf16,
            ..f32_config.model
        },
        ..f32_config.clone()
    };
    const STEPS: u64 = 6;
    let (straight, final_params) = run(&config, STEPS);
    assert!(straight.iter().all(|l| l.is_finite()));
    assert_ne!(
        run(&f32_config, STEPS).1,
        final_params,
        "bf16 rounds the products"
    );
    assert_eq!(
        on_threads(1, || run(&config, STEPS)),
        (straight.clone(), final_params.clone()),
        "1 thread"
    );
    let save = |config: &GptTrainConfig, name: &str| {
        let mut first = GptTrainer::new(config.clone()).unwrap();
        while first.step_count() < 3 {
            first.step().unwrap();
        }
        let path = dir.path().join(name);
        first.save(&path).unwrap();
        path
    };
    let header =
        |path: &Path| String::from_utf8_lossy(&std::fs::read(path).unwrap()[..4096]).into_owned();
    let f32_path = save(&f32_config, "f32.safetensors");
    assert!(
        !header(&f32_path).contains("precision"),
        "{}",
        header(&f32_path)
    );
    let path = save(&config, "bf16.safetensors");
    assert!(
        header(&path).contains(r#"\"precision\":\"bf16\""#),
        "{}",
        header(&path)
    );
    let mut resumed = GptTrainer::resume(&path, None, None).unwrap();
    assert_eq!(resumed.config().model.precision, Precision::Bf16);
    while resumed.step_count() < STEPS {
        resumed.step().unwrap();
    }
    assert_eq!(resumed.losses(), &straight[..]);
    assert_eq!(parameters(resumed.model()), final_params);
}

#[test]
fn workers_and_threads_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = tiny(write_text(dir.path(), "text.txt", 700));
    let (plain, params) = run(&config, 6);
    let workers = GptTrainConfig {
        num_workers: 3,
        ..config.clone()
    };
    assert_eq!(
        run(&workers, 6),
        (plain.clone(), params.clone()),
        "3 loader workers"
    );
    for threads in [1, 2] {
        assert_eq!(
            on_threads(threads, || run(&config, 6)),
            (plain.clone(), params.clone()),
            "{threads} threads"
        );
    }
}

#[test]
fn bad_text_and_shapes_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, b"").unwrap();
    let err = Text::read(&empty).unwrap_err().to_string();
    assert!(err.contains("is empty"), "{err}");

    let short = tiny(write_text(dir.path(), "short.txt", 8));
    let err = GptTrainer::new(short).unwrap_err().to_string();
    assert!(
        err.contains("8 bytes to train on (8 with val_fraction 0), shorter than a context of 8"),
        "{err}"
    );

    let data = write_text(dir.path(), "text.txt", 700);
    let long_context = GptTrainConfig {
        context: 9,
        ..tiny(data.clone())
    };
    let err = GptTrainer::new(long_context).unwrap_err().to_string();
    assert!(
        err.contains("context 9 does not fit the position table of block_size 8"),
        "{err}"
    );

    let mut heads = tiny(data.clone());
    heads.model.n_head = 3;
    let err = GptTrainer::new(heads).unwrap_err().to_string();
    assert!(err.contains("n_head 3 does not divide n_embd 16"), "{err}");

    // Another file where the run's text was: refused, not trained on.
    let mut moved = tiny(data);
    std::fs::write(&moved.data.path, vec![b'x'; 700]).unwrap();
    moved.seed = 6;
    let err = GptTrainer::new(moved).unwrap_err().to_string();
    assert!(err.contains("give the run's own text"), "{err}");
}

#[test]
fn checkpoints_of_another_model_or_optimiser_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mlp = TrainConfig::mlp(vec![6, 16, 4], 50, 8);
    let mut trainer = Trainer::new(mlp).unwrap();
    trainer.step().unwrap();
    let path = dir.path().join("mlp.safetensors");
    trainer.save(&path).unwrap();
    let err = GptTrainer::resume(&path, None, None).unwrap_err();
    assert!(
        matches!(&err, NnError::Checkpoint(CheckpointError::KindMismatch { saved, expected, .. })
            if saved == "mlp" && expected == "gpt"),
        "{err}"
    );
    assert!(err.to_string().contains("\"mlp\"") && err.to_string().contains("\"gpt\""));

    // SGD's state restored into AdamW: refused, both named.
    let ck = Checkpoint::load(&path).unwrap();
    let mut adamw = Optimizer::from(AdamW::new(AdamWConfig::new(1e-3)).unwrap());
    let err = ck
        .restore_optimizer("optim.", &mut adamw, trainer.model())
        .unwrap_err();
    assert!(
        matches!(&err, CheckpointError::KindMismatch { saved, expected, .. }
            if saved == "sgd" && expected == "adamw"),
        "{err}"
    );

    // And the GPT's checkpoint is refused as an MLP's.
    let mut gpt = GptTrainer::new(tiny(write_text(dir.path(), "text.txt", 700))).unwrap();
    gpt.step().unwrap();
    let gpt_path = dir.path().join("gpt.safetensors");
    gpt.save(&gpt_path).unwrap();
    let err = Trainer::resume(&gpt_path, None, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"gpt\"") && err.contains("\"mlp\""), "{err}");
}

#[test]
fn a_diverging_run_stops_at_the_step_its_loss_first_is_not_finite() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = tiny(write_text(dir.path(), "text.txt", 700));
    // A rate this high sends the weights to ~1e20 in one AdamW step; the next forward
    // overflows f32 (inf, then inf - inf in a layer norm) and the loss is NaN.
    config.optimizer.lr = 1e20;
    config.min_lr = 1e19;
    config.warmup = 0;
    config.grad_clip = 0.0;
    config.model.dropout = 0.0;
    let mut trainer = GptTrainer::new(config).unwrap();
    let err = loop {
        match trainer.step() {
            Ok(loss) => assert!(loss.is_finite()),
            Err(e) => break e,
        }
        assert!(
            trainer.step_count() < 20,
            "lr 1e20 did not diverge in 20 steps"
        );
    };
    let message = err.to_string();
    let NnError::NonFinite { step, what, .. } = err else {
        panic!("expected NonFinite, got {message}");
    };
    // Every step before it had a finite loss, and the message names the step.
    assert_eq!(step, trainer.losses().len() as u64 + 1, "{what}");
    assert!(
        message.starts_with(&format!("step {step}: the {what}")),
        "{message}"
    );
    assert!(message.contains("learning rate is too high"), "{message}");
}
