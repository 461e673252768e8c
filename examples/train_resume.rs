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
//! For a job restarted by its launcher, one line serves every start: `--checkpoint-dir
//! ck --save-every 20 --resume-latest` saves `ck/step-NNNNNNNN.safetensors` and resumes
//! the newest that loads (`common/elastic.rs`); every path is checked before step 1
//! (`common/outputs.rs`).
//! Read `run` top to bottom: start or resume, train, report. The loop itself is
//! `common/run.rs`, the one every training binary runs; this file keeps the MLP's
//! flags (`train_resume_support/args.rs`), its first line and its demo. A training
//! binary can start as a copy of it.

#[path = "train_resume_support/args.rs"]
mod args;
mod common;
#[path = "train_resume_support/demo.rs"]
mod demo;

use std::error::Error;
use std::process::ExitCode;

use nn_mini::train::{placed, Run, Trainer, TrainingRun};

use args::Args;
use common::run::{main_of, start, train, Steps, LOG_EVERY};

fn main() -> ExitCode {
    let args = Args::parse_or_exit();
    main_of(&args.run, args.demo, || demo::run(&args), || run(&args))
}

fn run(args: &Args) -> Result<ExitCode, Box<dyn Error>> {
    let flags = &args.run;

    // 1. Start fresh from the seed, or pick up a checkpoint (--resume, or the newest in
    //    --checkpoint-dir with --resume-latest). A resume may move the run to another
    //    device or worker count: the worker count never changes a number, the device
    //    keeps the random streams but rounds matmul and exp its own way (TrainConfig).
    let fresh = || Ok(flags.train_config(args.device.unwrap_or_default()));
    let adjust = placed(args.device, flags.workers);
    let started = start::<Trainer, Args>(flags, &(), fresh, adjust)?;

    // 2. Train. `step_deferred` is one SGD step: the loader's next batch, zero_grad,
    //    forward with dropout, cross-entropy, backward, SGD update (read it in
    //    crates/nn-mini/src/train/trainer.rs). Its loss stays on the device until
    //    `read_losses` brings every pending one over in one copy (`--log-every`), so a
    //    GPU is not waited for in each step. With `--cuda-graph` the step after the
    //    first is captured as a CUDA graph and replayed (same losses, one launch a step).
    let steps = Steps {
        read_every: args.log_every.unwrap_or(LOG_EVERY),
        cuda_graph: args.cuda_graph,
        val_column: false,
    };
    let (_, code) = train::<Trainer, Args>(
        started,
        flags,
        &steps,
        |run| {
            let c = run.config();
            let mut line = format!(
            "seed {} | MLP {:?} | dropout {} | SGD lr {} momentum {} | batch {} | workers {} | {}",
            c.seed, c.layers, c.dropout, c.lr, c.momentum, c.batch_size, c.num_workers, c.device
        );
            if c.device.is_cuda() {
                line += &format!("\n{}", run.placement());
            }
            line
        },
        &mut |_, _| Ok(None),
    )?;

    // 3. `train` compared the curve with --compare and drew --plot: its status is ours.
    Ok(code)
}
