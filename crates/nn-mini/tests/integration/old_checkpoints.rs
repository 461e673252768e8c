//! Checkpoints written by an older build still resume, bit for bit (issue 41): a
//! redesign of the parameter accessors or of how configurations are serialised must keep
//! every name, every order and every byte of `train.config`, or these fail.
//!
//! The fixtures were written by the `train_resume` and `train_gpt` examples of commit
//! 393ebb4, from the repository root, under portable arithmetic (so the losses are the
//! same bits on any x86-64 CPU, SIMD level and thread count, as CI needs):
//!
//! ```text
//! train_resume --portable --seed 7 --steps 12 --batch-size 16 --out mlp_portable_seed7_straight.csv
//! train_resume --portable --seed 7 --steps 12 --batch-size 16 --save-at 6 \
//!     --checkpoint mlp_portable_seed7_step6.safetensors
//! G="--portable --seed 7 --steps 6 --batch-size 4 --layers 1 --heads 2 --width 16 \
//!     --block-size 16 --context 16 --warmup 2 --lr 0.003 --sample 0"
//! train_gpt $G --out gpt_portable_seed7_straight.csv
//! train_gpt $G --save-at 3 --checkpoint gpt_portable_seed7_step3.safetensors
//! ```
//!
//! The MLP's width is the example's fixed demo model (64-256-256-10), hence 682 KB.
//! Each test runs in a process of its own (`own_process!`): portable arithmetic and the
//! default generators a resume restores are process-wide.

use std::path::PathBuf;

use nn_mini::gpt::{GptTrainConfig, GptTrainer};
use nn_mini::train::{Run, RunConfig, TrainLoop, Trainer, TrainingRun, CONFIG_KEY};
use nn_mini::Checkpoint;
use tensor_core::use_portable_arithmetic;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The `step,loss` rows of a CSV the examples wrote, losses as f32 bits.
fn recorded_losses(name: &str) -> Vec<(u64, u32)> {
    let text = std::fs::read_to_string(fixture(name)).unwrap();
    text.lines()
        .skip(1)
        .map(|row| {
            let (step, loss) = row.split_once(',').unwrap();
            (
                step.parse().unwrap(),
                loss.parse::<f32>().unwrap().to_bits(),
            )
        })
        .collect()
}

/// Runs `trainer` to the CSV's last step and checks every loss, old and new, against
/// the CSV's bits.
fn continues_the_recorded_curve<C: RunConfig>(mut trainer: TrainLoop<C>, csv: &str) {
    let recorded = recorded_losses(csv);
    let last = recorded.last().unwrap().0;
    while trainer.step_count() < last {
        trainer.step().unwrap();
    }
    let losses: Vec<(u64, u32)> = (1..)
        .zip(trainer.losses().iter().map(|l| l.to_bits()))
        .collect();
    assert_eq!(losses, recorded, "the resumed curve left the recorded one");
}

/// A resume re-saves the file it came from byte for byte once the configuration reads
/// as saved: names, order, every tensor and the metadata are all kept.
fn resaves_the_same_bytes<C: RunConfig>(trainer: &TrainLoop<C>, old: &[u8], saved_config: &str) {
    let mut again = trainer.checkpoint().unwrap();
    again.set_metadata(CONFIG_KEY, saved_config).unwrap();
    assert!(
        again.to_bytes().unwrap() == old,
        "the re-saved checkpoint differs"
    );
}

#[test]
fn an_old_mlp_checkpoint_resumes_bit_for_bit() {
    test_support::own_process!(an_old_mlp_checkpoint_resumes_bit_for_bit);
    use_portable_arithmetic(true);
    let path = fixture("mlp_portable_seed7_step6.safetensors");
    let old = std::fs::read(&path).unwrap();
    let ck = Checkpoint::from_bytes(&old).unwrap();
    let saved_config = ck.metadata(CONFIG_KEY).unwrap();
    assert_eq!(Trainer::config_of(&ck).unwrap().to_json(), saved_config);

    let trainer = Trainer::resume(&path, None, None).unwrap();
    assert_eq!(trainer.step_count(), 6);
    resaves_the_same_bytes(&trainer, &old, saved_config);
    continues_the_recorded_curve(trainer, "mlp_portable_seed7_straight.csv");
}

#[test]
fn an_old_gpt_checkpoint_resumes_bit_for_bit() {
    test_support::own_process!(an_old_gpt_checkpoint_resumes_bit_for_bit);
    use_portable_arithmetic(true);
    let old = std::fs::read(fixture("gpt_portable_seed7_step3.safetensors")).unwrap();
    let ck = Checkpoint::from_bytes(&old).unwrap();
    let saved_config = ck.metadata(CONFIG_KEY).unwrap();
    assert_eq!(
        GptTrainer::config_of(&ck).unwrap().to_json(),
        saved_config,
        "the configuration does not serialise to the bytes it was read from"
    );

    // The run recorded where its text was then; the same bytes are in this checkout.
    let text = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/emma.txt");
    let trainer = GptTrainer::from_checkpoint_in(&ck, &(), &mut |config: &mut GptTrainConfig| {
        config.data.path = text.display().to_string();
    })
    .unwrap();
    assert_eq!(trainer.step_count(), 3);
    resaves_the_same_bytes(&trainer, &old, saved_config);
    continues_the_recorded_curve(trainer, "gpt_portable_seed7_straight.csv");
}
