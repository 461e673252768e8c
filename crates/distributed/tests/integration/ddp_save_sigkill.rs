//! A data parallel run killed with SIGKILL while it saves (issue 20): 16 times, a child
//! process training on 2 thread ranks and saving after every step (rank 0 writes, as
//! `ddp_train --save-at` does) is killed: every other time as soon as a save is under
//! way, otherwise at a pseudo-random moment. Afterwards the
//! checkpoint at the path always resumes (on another world size, too): the old one or
//! the new one, never a half-written file, because `DdpTrainer::save` writes through
//! `Checkpoint::save` (temporary file, fsync, rename, fsync of the directory).
//!
//! The child is this test binary itself, running the ignored test `save_loop_child`
//! with `DITTO_DDP_SAVE_LOOP` naming the target.

#![cfg(unix)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use distributed::{DdpTrainer, ProcessGroup, ReduceMode, ThreadGroup};
use nn_mini::train::{Run, TrainConfig, TrainingRun};
use test_support::{temp_files, SaveLoopChild, SAVED};

const TARGET_ENV: &str = "DITTO_DDP_SAVE_LOOP";
const MODE: ReduceMode = ReduceMode::Invariant { micro_shards: 8 };

/// The child: trains the demo's model on 2 thread ranks and saves after every step,
/// forever, printing `saved` after each save. Does nothing without the variable.
#[test]
#[ignore = "the child process of a_ddp_run_killed_while_saving_leaves_a_checkpoint_that_resumes"]
fn save_loop_child() {
    let Ok(target) = std::env::var(TARGET_ENV) else {
        return;
    };
    ThreadGroup::run(2, |pg| -> distributed::Result<()> {
        let rank = pg.rank();
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        let mut trainer = DdpTrainer::new(TrainConfig::default(), MODE, group)?;
        loop {
            trainer.step()?;
            trainer.save(&target)?;
            if rank == 0 {
                println!("{SAVED}");
            }
        }
    })
    .unwrap();
}

#[test]
fn a_ddp_run_killed_while_saving_leaves_a_checkpoint_that_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("ddp.safetensors");
    let mut mid_save = 0;
    for kill in 0..16u64 {
        // After one complete save, kill mid-save or at a pseudo-random later moment.
        let child = SaveLoopChild::start(
            &test_support::exact_name(module_path!(), "save_loop_child"),
            TARGET_ENV,
            &target,
        );
        if kill % 2 == 0 {
            // Kill as soon as a save is under way (its temporary file exists), so kills
            // land mid-save however fast or loaded the machine is; bounded, so a child
            // that stopped saving cannot hang the test.
            let deadline = Instant::now() + Duration::from_secs(10);
            while temp_files(&target).is_empty() && Instant::now() < deadline {}
        } else {
            std::thread::sleep(Duration::from_micros((kill * 7_919) % 20_000));
        }
        child.kill();
        mid_save += temp_files(&target).len();
        let resumed = ThreadGroup::run(1, |pg| {
            let group: Arc<dyn ProcessGroup> = Arc::new(pg);
            let mut t = DdpTrainer::resume(&target, group, None)?;
            let step = t.step_count();
            t.step()?;
            Ok(step)
        })
        .unwrap_or_else(|e| panic!("after kill {kill} the checkpoint does not resume: {e}"));
        assert!(resumed[0] >= 1, "after kill {kill}: step {}", resumed[0]);
    }
    println!("{mid_save} of 16 kills landed during a save");
    assert!(
        mid_save > 0,
        "no kill landed during a save, so the test proved nothing about torn writes"
    );
}
