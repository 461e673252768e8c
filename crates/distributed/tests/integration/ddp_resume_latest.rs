//! Elastic restarts of a data parallel run (issue 27): `DdpTrainer::save_in` writes a
//! folder of periodic checkpoints from rank 0, and `DdpTrainer::resume_latest` resumes
//! every rank, at any world size, from the newest one that loads, as rank 0 chose it: a
//! damaged newest file is skipped (rank 0 reports it), the resumed run finishes with
//! the straight run's curve, an empty folder is a first start on every rank, and a
//! folder whose checkpoints all fail ends every rank.

use std::fs;
use std::num::NonZeroUsize;
use std::sync::Arc;

use distributed::{DdpTrainer, DistError, ProcessGroup, ReduceMode, ThreadGroup};
use nn_mini::checkpoint::CheckpointDir;
use nn_mini::train::{Run, TrainConfig, TrainingRun};
use nn_mini::{CheckpointError, NnError};

const INVARIANT: ReduceMode = ReduceMode::Invariant { micro_shards: 8 };

/// A small run: 8 batches per epoch.
fn config() -> TrainConfig {
    TrainConfig {
        seed: 11,
        ..TrainConfig::mlp(vec![16, 32, 32, 4], 256, 32)
    }
}

fn bits(losses: &[f32]) -> Vec<u32> {
    losses.iter().map(|l| l.to_bits()).collect()
}

#[test]
fn every_rank_resumes_the_newest_checkpoint_that_loads_at_another_world_size() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = CheckpointDir::new(tmp.path(), NonZeroUsize::new(3).unwrap());

    // 4 ranks, saving every 3 steps up to 12: rank 0 writes and prunes, and reports it.
    let straight = ThreadGroup::run(4, |pg| {
        let rank = pg.rank();
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        let mut t = DdpTrainer::new(config(), INVARIANT, group)?;
        while t.step_count() < 12 {
            t.step()?;
            if t.step_count().is_multiple_of(3) {
                let saved = t.save_in(&dir)?;
                assert_eq!(saved.is_some(), rank == 0, "only rank 0 writes");
            }
        }
        Ok(bits(t.losses()))
    })
    .unwrap();
    assert_eq!(dir.steps().unwrap(), [6, 9, 12]);

    // Step 12's file damaged: 2 ranks resume step 9, and finish with the same curve.
    let twelve = dir.path_of(12);
    let mut bytes = fs::read(&twelve).unwrap();
    bytes[100] ^= 0x40;
    fs::write(&twelve, bytes).unwrap();
    let resumed = ThreadGroup::run(2, |pg| {
        let rank = pg.rank();
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        let latest = DdpTrainer::resume_latest(&dir, group, None)?.expect("a checkpoint");
        assert_eq!(latest.resumed_from, Some(dir.path_of(9)));
        let skipped: Vec<_> = latest.skipped.iter().map(|s| s.path.clone()).collect();
        let expected = if rank == 0 {
            vec![twelve.clone()]
        } else {
            vec![]
        };
        assert_eq!(skipped, expected, "rank {rank}");
        let mut t = latest.run;
        assert_eq!(t.step_count(), 9);
        while t.step_count() < 12 {
            t.step()?;
        }
        Ok(bits(t.losses()))
    })
    .unwrap();
    for (rank, losses) in resumed.iter().enumerate() {
        assert_eq!(losses, &straight[0], "rank {rank}");
    }
}

#[test]
fn an_empty_folder_is_a_first_start_and_one_that_fails_ends_every_rank() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = CheckpointDir::new(tmp.path().join("ck"), NonZeroUsize::new(3).unwrap());
    let fresh = ThreadGroup::run(2, |pg| {
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        Ok(DdpTrainer::resume_latest(&dir, group, None)?.is_none())
    })
    .unwrap();
    assert_eq!(fresh, [true, true]);

    fs::create_dir(dir.path()).unwrap();
    fs::write(dir.path_of(5), b"not a checkpoint").unwrap();
    let errors = std::sync::Mutex::new(Vec::new());
    let _ = ThreadGroup::run(2, |pg| {
        let rank = pg.rank();
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        let err = DdpTrainer::resume_latest(&dir, group, None).unwrap_err();
        if rank == 0 {
            let typed = matches!(
                &err,
                DistError::Nn(NnError::Checkpoint(
                    CheckpointError::NoLoadableCheckpoint { .. }
                ))
            );
            assert!(typed, "{err:?}");
        }
        errors.lock().unwrap().push((rank, err.to_string()));
        Err::<(), _>(err)
    });
    let mut errors = errors.into_inner().unwrap();
    errors.sort();
    assert_eq!(errors.len(), 2);
    assert!(
        errors[0].1.contains("step-00000005.safetensors"),
        "{errors:?}"
    );
    assert!(errors[1].1.contains("rank 0 failed"), "{errors:?}");
}
