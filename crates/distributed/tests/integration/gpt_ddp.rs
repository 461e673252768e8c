//! The GPT run data parallel on the threads backend (issue 30): invariant mode gives
//! the same losses, parameters and dropout stream on 1, 2 and 4 ranks (every attention
//! and residual mask drawn at its sequence's global position); a checkpoint saved on 4
//! ranks resumes on 2 with the straight run's curve; fast mode on one rank is the
//! single-process GPT trainer, bit for bit; a folder of periodic checkpoints resumes its
//! newest on another world size (elastic restarts, as the MLP's).

use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::Arc;

use distributed::{DdpPlace, GptDdpTrainer, ProcessGroup, ReduceMode, ThreadGroup};
use nn_mini::checkpoint::CheckpointDir;
use nn_mini::gpt::{DataSpec, GptConfig, GptTrainConfig, GptTrainer, Precision, Text};
use nn_mini::train::{Run, TrainingRun};

use crate::support::outcome::{finish, outcome, Outcome};

const INVARIANT: ReduceMode = ReduceMode::Invariant { micro_shards: 8 };
const STEPS: u64 = 8;

/// A small text, written once to `dir` (ranks only read it).
fn write_text(dir: &Path) -> DataSpec {
    let path = dir.join("text.txt");
    let bytes: Vec<u8> =
        b"so she went on, wondering more and more at every step, as everything turned into a tree "
            .iter()
            .copied()
            .cycle()
            .take(900)
            .collect();
    std::fs::write(&path, &bytes).unwrap();
    DataSpec::of(&path, &Text::from_bytes(bytes))
}

/// [`GptTrainConfig::tiny`] over `data` (dropout on) with global batches of 8 sequences.
fn config(data: &DataSpec) -> GptTrainConfig {
    GptTrainConfig {
        seed: 3,
        batch_size: 8,
        ..GptTrainConfig::tiny(data.clone())
    }
}

fn straight(data: &DataSpec, world: usize, mode: ReduceMode) -> Vec<Outcome> {
    ThreadGroup::run(world, |pg| {
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        finish(GptDdpTrainer::new(config(data), mode, group)?, STEPS)
    })
    .unwrap()
}

/// bf16 autocast is entered by each rank's model on its own thread (the scope is
/// thread-local, as PyTorch's): invariant mode still gives one curve on 1, 2 and 4
/// ranks, and not the f32 curve.
#[test]
fn a_bf16_gpt_is_one_curve_for_1_2_and_4_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let data = write_text(dir.path());
    let run = |world: usize, precision: Precision| {
        ThreadGroup::run(world, |pg| {
            let group: Arc<dyn ProcessGroup> = Arc::new(pg);
            let base = config(&data);
            let config = GptTrainConfig {
                model: GptConfig {
                    precision,
                    ..base.model
                },
                ..base
            };
            finish(GptDdpTrainer::new(config, INVARIANT, group)?, STEPS)
        })
        .unwrap()
    };
    let reference = run(1, Precision::Bf16);
    assert_ne!(
        reference,
        run(1, Precision::F32),
        "bf16 rounds the products"
    );
    for world in [2, 4] {
        for (rank, got) in run(world, Precision::Bf16).iter().enumerate() {
            assert_eq!(got, &reference[0], "world {world} rank {rank}");
        }
    }
}

#[test]
fn invariant_mode_gives_one_gpt_curve_for_1_2_and_4_ranks_and_resumes_across_them() {
    let dir = tempfile::tempdir().unwrap();
    let data = write_text(dir.path());
    let reference = straight(&data, 1, INVARIANT);
    assert!(reference[0]
        .0
        .iter()
        .all(|&l| f32::from_bits(l).is_finite()));
    for world in [2, 4] {
        for (rank, got) in straight(&data, world, INVARIANT).iter().enumerate() {
            assert_eq!(got, &reference[0], "world {world} rank {rank}");
        }
    }
    // Saved on 4 ranks after step 3, resumed on 2.
    let path = dir.path().join("w4.safetensors");
    ThreadGroup::run(4, |pg| {
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        let mut t = GptDdpTrainer::new(config(&data), INVARIANT, group)?;
        while t.step_count() < 3 {
            t.step()?;
        }
        t.save(&path)
    })
    .unwrap();
    let resumed = ThreadGroup::run(2, |pg| {
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        finish(GptDdpTrainer::resume(&path, group, None)?, STEPS)
    })
    .unwrap();
    for (rank, got) in resumed.iter().enumerate() {
        assert_eq!(got, &reference[0], "4 -> 2 ranks, rank {rank}");
    }
}

#[test]
fn fast_mode_on_one_rank_is_the_single_process_gpt() {
    let dir = tempfile::tempdir().unwrap();
    let data = write_text(dir.path());
    let ddp = straight(&data, 1, ReduceMode::Fast);
    let mut single = GptTrainer::new(config(&data)).unwrap();
    while single.step_count() < STEPS {
        single.step().unwrap();
    }
    let want = outcome(
        single.losses(),
        single.model(),
        single.dropout_generator().offset(),
    );
    assert_eq!(ddp[0], want);
}

#[test]
fn a_gpt_run_resumes_the_newest_checkpoint_of_its_folder_on_another_world_size() {
    let tmp = tempfile::tempdir().unwrap();
    let data = write_text(tmp.path());
    std::fs::create_dir(tmp.path().join("ck")).unwrap();
    let dir = CheckpointDir::new(tmp.path().join("ck"), NonZeroUsize::new(2).unwrap());
    let reference = straight(&data, 1, INVARIANT);
    // 2 ranks, saving every 2 steps up to 6 (the newest 2 kept), then "killed".
    ThreadGroup::run(2, |pg| {
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        let mut t = GptDdpTrainer::new(config(&data), INVARIANT, group)?;
        while t.step_count() < 6 {
            t.step()?;
            if t.step_count().is_multiple_of(2) {
                t.save_in(&dir)?;
            }
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(dir.steps().unwrap(), [4, 6]);
    // A restart on 4 ranks finds step 6 and finishes with the 1-rank curve; the text's
    // path may be given anew (the resume's `adjust`), here the same one.
    let resumed = ThreadGroup::run(4, |pg| {
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        let path = data.path.clone();
        let place = DdpPlace::new(group, None);
        let latest = GptDdpTrainer::resume_newest(&dir, &place, &mut |c: &mut GptTrainConfig| {
            c.data.path.clone_from(&path)
        })?
        .expect("a checkpoint to resume");
        assert_eq!(latest.resumed_from, Some(dir.path_of(6)));
        finish(latest.run, STEPS)
    })
    .unwrap();
    for (rank, got) in resumed.iter().enumerate() {
        assert_eq!(
            got, &reference[0],
            "2 -> 4 ranks from the folder, rank {rank}"
        );
    }
}
