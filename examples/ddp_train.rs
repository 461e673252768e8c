//! # ddp_train: data parallel training whose loss curve does not depend on the number of ranks
//!
//! `train_resume`'s run (a 64-256-256-10 MLP with dropout, SGD, Gaussian clusters with
//! per-sample augmentation, everything derived from `--seed`) spread over ranks: each
//! rank loads its share of every global batch (`DistributedSampler`), draws dropout for
//! its rows at their global positions, and the gradients are summed across ranks. With
//! `--invariant` the sum runs over fixed micro-shards in one fixed tree, so the curve is
//! byte-identical for every world size from 1 to the micro-shard count (8 by default;
//! 3 ranks hold 3, 3 and 2 of them) and a checkpoint moves between world sizes:
//!
//! ```text
//! cargo run --release --example ddp_train -- --backend threads --world-size 4 --seed 7 \
//!     --steps 100 --invariant --out w4.csv
//! cargo run --release --example ddp_train -- --backend threads --world-size 1 --seed 7 \
//!     --steps 100 --invariant --out w1.csv             # w1.csv == w4.csv, byte for byte
//! cargo build --release --features mpi --example ddp_train
//! mpirun --allow-run-as-root --oversubscribe -np 4 target/release/examples/ddp_train \
//!     --backend mpi --seed 7 --steps 100 --invariant --out m4.csv   # the same bytes
//! cargo run --release --example ddp_train -- --demo    # 1 rank, 4 ranks, 4 -> 2 resume
//! ```
//!
//! With `--checkpoint-dir ck --save-every N --resume-latest` the same line serves a job's
//! first start and every restart, at any world size (`common/elastic.rs`).
//!
//! Rank 0 prints the progress, writes the CSV and compares. Read `main` and `run_rank`
//! top to bottom: the loop is `train_resume`'s (`common/run.rs`), with
//! `distributed::DdpTrainer` in place of `nn_mini::train::Trainer`.

#[path = "ddp_train_support/args.rs"]
mod args;
mod common;
#[path = "ddp_train_support/demo.rs"]
mod demo;

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;

use distributed::{DdpPlace, DdpTrainer, ProcessGroup, ReduceMode};
use nn_mini::train::{placed, TrainingRun};

use args::Args;
use common::ddp::launch;
use common::run::{main_of, start, train, Steps};

fn main() -> ExitCode {
    let args = Args::parse_or_exit();
    // A fresh run's global batch, checked against the world size before the ranks meet.
    let batch = args
        .run
        .resume
        .is_none()
        .then(|| args.run.batch_size.unwrap_or(128));
    let ranks = || {
        launch::<Args>(&args.ddp, args.backend(), batch, "ddp_train", &|group| {
            run_rank(&args, group)
        })
    };
    main_of(&args.run, args.demo, || demo::run(&args), ranks)
}

/// One rank's whole run. Every rank trains; rank 0 also talks and writes.
fn run_rank(args: &Args, group: Arc<dyn ProcessGroup>) -> Result<ExitCode, Box<dyn Error>> {
    let flags = &args.run;
    let world = group.world_size();

    // 1. Start fresh from the seed, or pick up a checkpoint saved on any world size
    //    (rank 0 reads it and sends the bytes, so every rank resumes the same step). A
    //    resume continues the saved reduce mode (--invariant may only repeat it).
    let place = DdpPlace::new(group.clone(), args.ddp.asked_mode());
    let fresh = || Ok(flags.train_config(group.device()));
    let started = start::<DdpTrainer, Args>(flags, &place, fresh, placed(None, flags.workers))?;

    // 2. Train: each step is one SGD step on this rank's rows of the next global batch,
    //    its gradients summed across the ranks (a collective: every rank calls it; read
    //    it in crates/distributed/src/trainer/run.rs). Rank 0 writes the CSV and the
    //    checkpoints and finally compares.
    let steps = Steps {
        read_every: 1,
        cuda_graph: false,
        val_column: false,
    };
    let (_, code) = train::<DdpTrainer, Args>(
        started,
        flags,
        &steps,
        |run| {
            let c = run.config();
            // Fast mode deals batch / W rows to each rank; the invariant mode whole micro-shards.
            let share = match run.mode() {
                ReduceMode::Fast => format!("{} per rank x {world}", c.batch_size / world),
                ReduceMode::Invariant { .. } => format!("whole micro-shards per rank x {world}"),
            };
            format!(
            "seed {} | MLP {:?} | dropout {} | SGD lr {} momentum {} | batch {} ({share}) | {} | {}",
            c.seed,
            c.layers,
            c.dropout,
            c.lr,
            c.momentum,
            c.batch_size,
            run.group().backend(),
            run.mode()
        )
        },
        &mut |_, _| Ok(None),
    )?;
    Ok(code)
}
