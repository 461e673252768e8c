//! # ddp_train: data parallel training whose loss curve does not depend on the number of ranks
//!
//! `train_resume`'s run (a 64-256-256-10 MLP with dropout, SGD, Gaussian clusters with
//! per-sample augmentation, everything derived from `--seed`) spread over ranks: each
//! rank loads its share of every global batch (`DistributedSampler`), draws dropout for
//! its rows at their global positions, and the gradients are summed across ranks. With
//! `--invariant` the sum runs over fixed micro-shards in one fixed tree, so the curve is
//! byte-identical for 1, 2 and 4 ranks and a checkpoint moves between world sizes:
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

use distributed::{DdpTrainer, ProcessGroup};

use args::Args;
use common::ddp::launch;
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

/// One rank's whole run. Every rank trains; rank 0 also talks.
fn run_rank(args: &Args, group: Arc<dyn ProcessGroup>) -> Result<ExitCode, Box<dyn Error>> {
    let flags = &args.run;
    let (rank, world) = (group.rank(), group.world_size());
    let say = |line: String| {
        if rank == 0 {
            println!("{line}");
        }
    };
    let mode = args.ddp.mode();

    // 1. Start fresh from the seed, or pick up a checkpoint (saved on any world size).
    let mut trainer = match &flags.resume {
        None => {
            let config = flags.train_config(group.device());
            rng_gen::manual_seed(config.seed);
            DdpTrainer::new(config, mode, group)?
        }
        Some(path) => {
            let trainer = DdpTrainer::resume(path, group, flags.workers)
                .map_err(|e| format!("cannot resume from {}: {e}", path.display()))?;
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
    say(format!(
        "seed {} | MLP {:?} | dropout {} | SGD lr {} momentum {} | batch {} ({} per rank x {world}) | {} | {}",
        c.seed,
        c.layers,
        c.dropout,
        c.lr,
        c.momentum,
        c.batch_size,
        c.batch_size / world,
        trainer.group().backend(),
        trainer.mode()
    ));

    // 2. Train. `trainer.step()` is one SGD step on this rank's rows of the next global
    //    batch, its gradients summed across the ranks (a collective: every rank calls
    //    it; read it in crates/distributed/src/trainer/mod.rs). `--save-at`
    //    checkpoints after that step (rank 0 writes) and stops.
    let mut progress = Progress::new(flags, steps);
    while trainer.step_count() < steps {
        let loss = trainer.step()?;
        let step = trainer.step_count();
        if let Some(line) = progress.record(step, loss) {
            say(line);
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
    if rank != 0 {
        return Ok(ExitCode::SUCCESS);
    }

    // 3. Rank 0: this run's rows, the comparison, the plot (as train_resume does).
    Report::of(flags).finish(
        &progress.rows,
        trainer.losses(),
        flags.resume.as_ref().map(|_| done),
    )
}
