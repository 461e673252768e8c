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
//! top to bottom: the loop is the one of `train_resume`, with `distributed::DdpTrainer`
//! in place of `nn_mini::train::Trainer`; `common/` holds what the two share.

#[path = "ddp_train_support/args.rs"]
mod args;
mod common;
#[path = "ddp_train_support/demo.rs"]
mod demo;

use nn_mini::train::TrainingRun;
use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;

use distributed::{DdpTrainer, ProcessGroup, ReduceMode};

use args::Args;
use common::ddp::{check_outputs_on_rank0, launch};
use common::elastic::{self, save_due};
use common::flags::check_same;
use common::report::Report;
use common::run::{checkpoint_path, exit_code, last_step, Progress};

fn main() -> ExitCode {
    let args = Args::parse_or_exit();
    args.run.apply_switches();
    exit_code(if args.demo {
        demo::run(&args)
    } else {
        let batch = args
            .run
            .resume
            .is_none()
            .then(|| args.run.batch_size.unwrap_or(128));
        launch::<Args>(&args.ddp, args.backend(), batch, "ddp_train", &|group| {
            run_rank(&args, group)
        })
    })
}

/// One rank's whole run. Every rank trains; rank 0 also talks and writes.
fn run_rank(args: &Args, group: Arc<dyn ProcessGroup>) -> Result<ExitCode, Box<dyn Error>> {
    let flags = &args.run;
    let (rank, world) = (group.rank(), group.world_size());
    let say = |line: String| {
        if rank == 0 {
            println!("{line}");
        }
    };
    let mode = args.ddp.mode();

    // 0. Rank 0, the only rank that writes, checks every path the run writes before
    //    anything else, and every rank learns the outcome: a bad path ends all ranks
    //    now, not after the training.
    check_outputs_on_rank0(flags, &*group)?;
    let dir = elastic::checkpoint_dir(flags);

    // 1. Start fresh from the seed, or pick up a checkpoint (saved on any world size):
    //    the one --resume names, or with --resume-latest the newest in --checkpoint-dir
    //    that loads, as rank 0 finds it (it sends the bytes to every rank, so all ranks
    //    resume the same step; none there: a first start).
    let resumed = match (&flags.resume, &dir) {
        (Some(path), _) => Some((
            DdpTrainer::resume(path, group.clone(), flags.workers)
                .map_err(|e| format!("cannot resume from {}: {e}", path.display()))?,
            path.clone(),
        )),
        (None, Some(dir)) if flags.resume_latest => {
            DdpTrainer::resume_latest(dir, group.clone(), flags.workers)?.map(|latest| {
                elastic::warn_skipped(&latest.skipped);
                (latest.trainer, latest.path)
            })
        }
        _ => None,
    };
    let resumed_from = resumed.as_ref().map(|(_, path)| path.clone());
    let mut trainer = match resumed {
        None => {
            let config = flags.train_config(group.device());
            rng_gen::manual_seed(config.seed);
            DdpTrainer::new(config, mode, group)?
        }
        Some((trainer, path)) => {
            let saved = trainer.config();
            check_same::<Args, _>("--seed", flags.seed, saved.seed)?;
            check_same::<Args, _>("--batch-size", flags.batch_size, saved.batch_size)?;
            args.ddp.check_resumed_mode::<Args>(trainer.mode())?;
            say(format!(
                "resumed {} at step {} (epoch {}, batch {}) on {world} rank(s)",
                path.display(),
                trainer.step_count(),
                trainer.loader().epoch(),
                trainer.loader().position()
            ));
            trainer
        }
    };
    let done = trainer.step_count();
    let steps = last_step::<Args>(flags, done)?;
    let c = trainer.config();
    // Fast mode deals batch / W rows to each rank; the invariant mode whole micro-shards.
    let share = match trainer.mode() {
        ReduceMode::Fast => format!("{} per rank x {world}", c.batch_size / world),
        ReduceMode::Invariant { .. } => format!("whole micro-shards per rank x {world}"),
    };
    say(format!(
        "seed {} | MLP {:?} | dropout {} | SGD lr {} momentum {} | batch {} ({share}) | {} | {}",
        c.seed,
        c.layers,
        c.dropout,
        c.lr,
        c.momentum,
        c.batch_size,
        trainer.group().backend(),
        trainer.mode()
    ));

    // 2. Train. `trainer.step()` is one SGD step on this rank's rows of the next global
    //    batch, its gradients summed across the ranks (a collective: every rank calls
    //    it; read it in crates/distributed/src/trainer/mod.rs). Rank 0 appends each
    //    loss to the CSV. `--checkpoint-dir` saves every `--save-every` steps and at the
    //    last (rank 0 writes; a collective); `--save-at` checkpoints after that step
    //    (rank 0 writes) and stops.
    let csv = match rank {
        0 => elastic::open_csv(flags, trainer.losses())?,
        _ => None,
    };
    let mut progress = Progress::new(flags, steps, csv);
    while trainer.step_count() < steps {
        let loss = trainer.step()?;
        let step = trainer.step_count();
        if let Some(line) = progress.record(step, loss)? {
            say(line);
        }
        if let Some(dir) = dir.as_ref().filter(|_| save_due(flags, step, steps)) {
            if let Some(saved) = trainer.save_in(dir)? {
                say(elastic::saved_line(&saved, step));
            }
        }
        if Some(step) == flags.save_at {
            let path = checkpoint_path(flags);
            trainer.save(&path)?;
            say(format!(
                "saved {} after step {step}; stopping here",
                path.display()
            ));
            break;
        }
    }
    if done == steps {
        say(format!(
            "the run had finished: step {done} of {steps}; nothing left to train"
        ));
    }
    if rank != 0 {
        return Ok(ExitCode::SUCCESS);
    }

    // 3. Rank 0: the comparison and the plot (as train_resume does).
    let rows = elastic::report_rows(flags, &progress.rows, trainer.losses());
    Report::of(flags).finish(&rows, trainer.losses(), resumed_from.map(|_| done))
}
