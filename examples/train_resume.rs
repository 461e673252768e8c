//! # train_resume: kill a training run, resume it, get the same loss curve bit for bit
//!
//! A 64-256-256-10 MLP with dropout 0.1, trained with SGD (lr 0.05, momentum 0.9) on
//! Gaussian clusters generated from the seed, with per-sample augmentation noise drawn
//! from each sample's own key. Everything random (init, dropout masks, shuffles,
//! augmentation) derives from `--seed` through `fold_in`, and everything stateful
//! (weights, momentum, generators, loader position, step, loss history) goes into one
//! safetensors checkpoint. So:
//!
//! ```text
//! cargo run --release --example train_resume -- --seed 7 --steps 200 --out a.csv
//! cargo run --release --example train_resume -- --seed 7 --steps 200 --save-at 120 \
//!     --checkpoint ck.safetensors --out b.csv
//! cargo run --release --example train_resume -- --resume ck.safetensors --steps 200 \
//!     --out c.csv --compare a.csv          # prints `identical: yes`
//! cargo run --release --example train_resume -- --demo   # all three, and a loss-curve PNG
//! ```
//!
//! Steps 121..200 of `a.csv` and `c.csv` are byte-identical, with any `--workers`.
//! The loop itself lives in `nn_mini::train` so tests can resume it at every step; this
//! file is the command line around it. Read `main` and `run` top to bottom.

#[path = "train_resume_support/args.rs"]
mod args;
#[path = "train_resume_support/curves.rs"]
mod curves;
#[path = "train_resume_support/demo.rs"]
mod demo;
#[path = "common/flags.rs"]
mod flags;
#[path = "train_resume_support/plot.rs"]
mod plot;
#[path = "train_resume_support/report.rs"]
mod report;

use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

use nn_mini::train::{TrainConfig, Trainer};
use nn_mini::Checkpoint;

use args::Args;
use flags::{check_same, conflict};
use report::Report;

/// Print a progress line every this many steps.
const LOG_EVERY: u64 = 20;

fn main() -> ExitCode {
    let args = Args::parse_or_exit();
    if let Some(mode) = args.run.deterministic {
        tensor_core::use_deterministic_algorithms(mode.into());
    }
    let result = if args.demo {
        demo::run(&args)
    } else {
        run(&args)
    };
    match result {
        Ok(code) => code,
        // Flags that contradict the checkpoint or each other: clap's format, status 2.
        Err(e) => match e.downcast::<clap::Error>() {
            Ok(e) => e.exit(),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(3)
            }
        },
    }
}

fn run(args: &Args) -> Result<ExitCode, Box<dyn Error>> {
    let flags = &args.run;
    // 1. Start fresh from the seed, or pick up a checkpoint. A resume takes every
    //    setting from the checkpoint; flags may only repeat them (or change the worker
    //    count, which never changes a number, or the device, which keeps the random
    //    streams but rounds matmul and exp differently: see TrainConfig).
    let mut trainer = match &flags.resume {
        None => {
            let config = TrainConfig {
                seed: flags.seed.unwrap_or(0),
                batch_size: flags.batch_size.unwrap_or(128),
                num_workers: flags.workers.unwrap_or(0),
                device: args.device.unwrap_or_default(),
                ..TrainConfig::default()
            };
            // Like torch.manual_seed: the loop itself draws from its own generators, but
            // anything around it that uses the default generator is reproducible too.
            rng_gen::manual_seed(config.seed);
            Trainer::new(config)?
        }
        Some(path) => {
            let ck = Checkpoint::load(path)
                .map_err(|e| format!("cannot resume from {}: {e}", path.display()))?;
            let saved = Trainer::config_of(&ck)?;
            check_same::<Args, _>("--seed", flags.seed, saved.seed)?;
            check_same::<Args, _>("--batch-size", flags.batch_size, saved.batch_size)?;
            let trainer = Trainer::from_checkpoint(&ck, flags.workers, args.device)
                .map_err(|e| format!("cannot resume from {}: {e}", path.display()))?;
            println!(
                "resumed {} at step {} (epoch {}, batch {} of the epoch)",
                path.display(),
                trainer.step_count(),
                trainer.loader().epoch(),
                trainer.loader().position()
            );
            trainer
        }
    };
    let steps = flags.steps.unwrap_or(200);
    let done = trainer.step_count();
    if steps <= done || flags.save_at.is_some_and(|k| k <= done) {
        return Err(conflict::<Args>(format!(
            "the run is already at step {done}: --steps ({steps}) and --save-at must be later"
        ))
        .into());
    }
    let config = trainer.config();
    println!(
        "seed {} | MLP {:?} | dropout {} | SGD lr {} momentum {} | batch {} | workers {} | {}",
        config.seed,
        config.layers,
        config.dropout,
        config.lr,
        config.momentum,
        config.batch_size,
        config.num_workers,
        config.device
    );
    if let tensor_core::Device::Cuda(ordinal) = config.device {
        // The driver's name for the device, so that a log of a run on the host-executed
        // CUDA stand-in (docs/cuda-standin.md) never passes for a GPU run.
        let name = tensor_core::cuda::get_device_name(ordinal)?;
        println!("{}: {name}", config.device);
    }

    // 2. Train. Each step: next batch, forward with dropout, cross-entropy, backward,
    //    SGD. `--save-at` checkpoints after that step and stops, as if the job had been
    //    killed there.
    let mut rows: Vec<(u64, f32)> = Vec::new();
    let started = Instant::now();
    while trainer.step_count() < steps {
        let loss = trainer.step()?;
        let step = trainer.step_count();
        rows.push((step, loss));
        if step % LOG_EVERY == 0 || step == steps || Some(step) == flags.save_at {
            let rate = rows.len() as f64 / started.elapsed().as_secs_f64();
            println!("step {step:>5}/{steps} | loss {loss:.6} | {rate:>7.1} steps/s");
        }
        if Some(step) == flags.save_at {
            let path = flags
                .checkpoint
                .clone()
                .unwrap_or_else(|| "checkpoint.safetensors".into());
            trainer.save(&path)?;
            println!("saved {} after step {step}; stopping here", path.display());
            break;
        }
    }

    // 3. Write this run's rows, compare them with another run step for step and bit
    //    for bit, and plot the whole history (restored steps included) over it.
    let report = Report {
        out: flags.out.as_deref(),
        compare: flags.compare.as_deref(),
        plot: flags.plot.as_deref(),
    };
    report.finish(&rows, trainer.losses(), flags.resume.as_ref().map(|_| done))
}
