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
use std::time::Duration;

use distributed::{DdpTrainer, ProcessGroup, ReduceMode, ThreadGroup};

use args::{Args, BackendFlag};
use common::elastic::{self, save_due};
use common::flags::{check_same, conflict};
use common::outputs;
use common::report::Report;
use common::run::{checkpoint_path, exit_code, last_step, Progress};

fn main() -> ExitCode {
    let args = Args::parse_or_exit();
    args.run.apply_switches();
    exit_code(if args.demo {
        demo::run(&args)
    } else {
        launch(&args)
    })
}

/// Starts the ranks on the chosen backend and returns rank 0's exit code. What can be
/// checked before the ranks meet is checked first, so a bad launch is an error on every
/// rank at once rather than a hang in a collective.
fn launch(args: &Args) -> Result<ExitCode, Box<dyn Error>> {
    let timeout = match args.collective_timeout {
        Some(seconds) => Duration::from_secs(seconds),
        None => distributed::collective_timeout_from_env()?,
    };
    match args.backend {
        BackendFlag::Threads => {
            let world = args.world_size.unwrap_or(1);
            check_batch_divides(args, world, "--world-size")?;
            // Each rank runs in its own thread; rank 0's exit code is the program's.
            let codes = ThreadGroup::run_with_timeout(world, timeout, |pg| {
                let rank = pg.rank();
                run_rank(args, Arc::new(pg)).map_err(|e| distributed::DistError::RemoteFailure {
                    rank,
                    message: e.to_string(),
                })
            });
            Ok(codes?.swap_remove(0))
        }
        BackendFlag::Mpi => mpi_group().and_then(|group| run_rank(args, group)),
        BackendFlag::Nccl => {
            // torchrun's variables, checked before the rendezvous (typed errors naming
            // the variable and its range).
            let env = distributed::LaunchEnv::from_env()?;
            check_batch_divides(args, env.world_size, "WORLD_SIZE")?;
            nccl_group(timeout).and_then(|group| run_rank(args, group))
        }
    }
}

/// A fresh run's global batch (`--batch-size`) must divide among the ranks; a resume
/// takes its batch from the checkpoint, checked by `DdpTrainer` before any collective.
fn check_batch_divides(args: &Args, world: usize, source: &str) -> Result<(), Box<dyn Error>> {
    let batch = args.run.batch_size.unwrap_or(128);
    if args.run.resume.is_none() && !batch.is_multiple_of(world) {
        return Err(conflict::<Args>(format!(
            "--batch-size {batch} (the global batch) does not divide among the {world} ranks of {source}: expected a multiple of {world}"
        ))
        .into());
    }
    Ok(())
}

#[cfg(feature = "mpi")]
fn mpi_group() -> Result<Arc<dyn ProcessGroup>, Box<dyn Error>> {
    Ok(Arc::new(distributed::MpiGroup::init()?))
}

#[cfg(not(feature = "mpi"))]
fn mpi_group() -> Result<Arc<dyn ProcessGroup>, Box<dyn Error>> {
    Err("this binary was built without MPI: cargo build --release --features mpi --example ddp_train".into())
}

/// Joins the NCCL job (rendezvous within 5 minutes), each collective bounded by
/// `collective_timeout`.
#[cfg(feature = "nccl")]
fn nccl_group(collective_timeout: Duration) -> Result<Arc<dyn ProcessGroup>, Box<dyn Error>> {
    let rendezvous = Duration::from_secs(300);
    Ok(Arc::new(
        distributed::NcclGroup::from_env(rendezvous)?.with_timeout(collective_timeout),
    ))
}

#[cfg(not(feature = "nccl"))]
fn nccl_group(_: Duration) -> Result<Arc<dyn ProcessGroup>, Box<dyn Error>> {
    Err("this binary was built without NCCL: cargo build --release --features nccl --example ddp_train".into())
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
    let mode = match args.invariant {
        true => ReduceMode::Invariant {
            micro_shards: args.micro_shards.unwrap_or(8),
        },
        false => ReduceMode::Fast,
    };

    // 0. Rank 0, the only rank that writes, checks every path the run writes before
    //    anything else, and every rank learns the outcome: a bad path ends all ranks
    //    now, not after the training.
    let checked = match rank {
        0 => outputs::check(flags),
        _ => Ok(()),
    };
    if !distributed::broadcast_flag(&*group, checked.is_ok(), 0)? {
        checked?;
        return Err(distributed::DistError::RemoteFailure {
            rank: 0,
            message: "cannot write the run's outputs (its error names the path)".into(),
        }
        .into());
    }
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
            if trainer.mode() != mode && (args.invariant || args.micro_shards.is_some()) {
                return Err(conflict::<Args>(format!(
                    "the checkpoint was saved in {} mode; a resume continues it",
                    trainer.mode()
                ))
                .into());
            }
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
