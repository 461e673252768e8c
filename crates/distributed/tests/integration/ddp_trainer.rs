//! The data parallel training loop on the threads backend: invariant mode gives the
//! same loss curve, parameters and generator positions on every world size from 1 to
//! 8 ranks (8 micro-shards), also on an epoch that does not divide by the world size; a
//! checkpoint saved on one world size resumes on another (4 on 2, 1 and 3; 3 on 2; 2 on
//! 5; 5 on 1) with the straight run's curve; fast mode on one rank is the
//! single-process trainer, bit for bit.

use std::path::Path;
use std::sync::Arc;

use distributed::{DdpTrainer, DistError, ProcessGroup, ReduceMode, ThreadGroup};
use nn_mini::train::{Run, RunConfig, TrainConfig, Trainer, TrainingRun};

use crate::support::outcome::{finish, outcome, Outcome};

const INVARIANT: ReduceMode = ReduceMode::Invariant { micro_shards: 8 };

/// A small run: 8 batches per epoch, so 20 steps cross two epoch boundaries.
fn config() -> TrainConfig {
    TrainConfig {
        seed: 11,
        ..TrainConfig::mlp(vec![16, 32, 32, 4], 256, 32)
    }
}

/// [`config`] on 250 samples: the last batch of each epoch has 26 rows, and no world
/// size but 1 and 2 divides the epoch (fast mode would pad it).
fn uneven_config() -> TrainConfig {
    TrainConfig {
        dataset_size: 250,
        ..config()
    }
}

fn straight(world: usize, mode: ReduceMode, steps: u64) -> Vec<Outcome> {
    straight_with(config(), world, mode, steps)
}

fn straight_with(config: TrainConfig, world: usize, mode: ReduceMode, steps: u64) -> Vec<Outcome> {
    ThreadGroup::run(world, |pg| {
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        finish(DdpTrainer::new(config.clone(), mode, group)?, steps)
    })
    .unwrap()
}

#[test]
fn invariant_mode_gives_one_curve_for_every_world_size_up_to_8() {
    for config in [config(), uneven_config()] {
        let reference = straight_with(config.clone(), 1, INVARIANT, 20);
        for world in 2..=8 {
            let outcomes = straight_with(config.clone(), world, INVARIANT, 20);
            for (rank, got) in outcomes.iter().enumerate() {
                assert_eq!(
                    got, &reference[0],
                    "{} samples, world {world} rank {rank}",
                    config.dataset_size
                );
            }
        }
    }
}

#[test]
fn fast_mode_on_one_rank_is_the_single_process_trainer() {
    let mut single = Trainer::new(config()).unwrap();
    for _ in 0..20 {
        single.step().unwrap();
    }
    let expected = outcome(
        single.losses(),
        single.model(),
        single.dropout_generator().offset(),
    );
    assert_eq!(straight(1, ReduceMode::Fast, 20)[0], expected);
    // Two ranks in fast mode agree with each other (and with invariant mode only
    // approximately: another summation order).
    let two = straight(2, ReduceMode::Fast, 20);
    assert_eq!(two[0], two[1]);
    assert_eq!(two[0].2, expected.2, "dropout generators stay in lockstep");
}

fn save_then_resume(dir: &Path, save_world: usize, resume_world: usize) -> Vec<Outcome> {
    save_then_resume_with(config(), dir, save_world, resume_world)
}

fn save_then_resume_with(
    config: TrainConfig,
    dir: &Path,
    save_world: usize,
    resume_world: usize,
) -> Vec<Outcome> {
    let path = dir.join(format!("w{save_world}-to-w{resume_world}.safetensors"));
    ThreadGroup::run(save_world, |pg| {
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        let mut t = DdpTrainer::new(config.clone(), INVARIANT, group)?;
        for _ in 0..11 {
            t.step()?;
        }
        t.save(&path)
    })
    .unwrap();
    ThreadGroup::run(resume_world, |pg| {
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        let t = DdpTrainer::resume(&path, group, None)?;
        assert_eq!(t.step_count(), 11);
        finish(t, 20)
    })
    .unwrap()
}

#[test]
fn a_checkpoint_from_4_ranks_resumes_on_2_and_on_1_with_the_same_curve() {
    let dir = tempfile::tempdir().unwrap();
    let reference = &straight(4, INVARIANT, 20)[0];
    for resume_world in [2, 1] {
        for got in save_then_resume(dir.path(), 4, resume_world) {
            assert_eq!(&got, reference, "saved on 4, resumed on {resume_world}");
        }
    }
}

/// Issue 28: a checkpoint moves between any two world sizes up to the micro-shard
/// count, on an epoch with a short last batch (steps 12..20 cross it).
#[test]
fn checkpoints_resume_across_uneven_world_sizes_with_the_same_curve() {
    let dir = tempfile::tempdir().unwrap();
    let reference = &straight_with(uneven_config(), 1, INVARIANT, 20)[0];
    for (save_world, resume_world) in [(4, 3), (3, 2), (2, 5), (5, 1)] {
        let outcomes = save_then_resume_with(uneven_config(), dir.path(), save_world, resume_world);
        for (rank, got) in outcomes.iter().enumerate() {
            assert_eq!(
                got, reference,
                "saved on {save_world}, resumed on {resume_world}, rank {rank}"
            );
        }
    }
}

#[test]
fn bad_layouts_and_missing_files_are_typed_errors() {
    let three = ThreadGroup::run(3, |pg| {
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        Ok(DdpTrainer::new(config(), ReduceMode::Fast, group).unwrap_err())
    })
    .unwrap();
    assert!(
        three
            .iter()
            .all(|e| matches!(e, DistError::InvalidArgument { .. })),
        "32 rows on 3 ranks"
    );
    let nine = ThreadGroup::run(9, |pg| {
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        Ok(DdpTrainer::new(config(), INVARIANT, group).unwrap_err())
    })
    .unwrap();
    for e in &nine {
        assert!(
            matches!(
                e,
                DistError::TooManyRanks {
                    world_size: 9,
                    micro_shards: 8
                }
            ),
            "{e}"
        );
    }
    // 257 samples: the last batch of an epoch is one row, shard 0's; on 2 ranks rank 1
    // holds none of it, and both ranks say so before any collective.
    let one_row_tail = TrainConfig {
        dataset_size: 257,
        ..config()
    };
    let errors = ThreadGroup::run(2, |pg| {
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        Ok(DdpTrainer::new(one_row_tail.clone(), INVARIANT, group).unwrap_err())
    })
    .unwrap();
    for e in &errors {
        let text = e.to_string();
        assert!(
            text.contains("rank 1 of 2 holds the micro-shards [1, 5, 3, 7] of 8")
                && text.contains("has 1 rows"),
            "{text}"
        );
    }
    let missing = ThreadGroup::run(2, |pg| {
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        Ok(DdpTrainer::resume("/nonexistent/ck.safetensors", group, None).unwrap_err())
    })
    .unwrap();
    assert!(matches!(missing[0], DistError::Io { .. }), "{}", missing[0]);
    assert!(
        matches!(missing[1], DistError::RemoteFailure { rank: 0, .. }),
        "{}",
        missing[1]
    );
}

/// A checkpoint of another kind of run, or of another model, is a typed error naming
/// what does not fit, on every rank, before any training step (issue 20).
#[test]
fn a_checkpoint_of_another_run_or_model_is_refused_on_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    // A single-process run's checkpoint: no reduce mode.
    let single = dir.path().join("single.safetensors");
    let mut t = Trainer::new(config()).unwrap();
    t.step().unwrap();
    t.save(&single).unwrap();
    // A data parallel checkpoint whose configuration names another model than its
    // tensors hold.
    let other = dir.path().join("other-model.safetensors");
    ThreadGroup::run(1, |pg| {
        let t = DdpTrainer::new(config(), INVARIANT, Arc::new(pg))?;
        let mut ck = t.checkpoint()?;
        let wider = TrainConfig {
            layers: vec![16, 64, 32, 4],
            ..config()
        };
        ck.set_metadata(nn_mini::train::CONFIG_KEY, wider.to_json())?;
        ck.save(&other)?;
        Ok(())
    })
    .unwrap();
    for (path, says) in [
        (&single, "not written by a data parallel run"),
        (
            &other,
            "\"model.0.weight\" has shape [32, 16], expected [64, 16]",
        ),
    ] {
        let errors = ThreadGroup::run(2, |pg| {
            let group: Arc<dyn ProcessGroup> = Arc::new(pg);
            Ok(DdpTrainer::resume(path, group, None)
                .unwrap_err()
                .to_string())
        })
        .unwrap();
        for (rank, error) in errors.iter().enumerate() {
            assert!(
                error.contains(says),
                "rank {rank}, {}: {error}",
                path.display()
            );
        }
    }
}
