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
//! Read `main` top to bottom: set up or resume, train, report. A training binary can
//! start as a copy of this file, `train_resume_support/args.rs` (its flags) and
//! `common/` (what it shares with `ddp_train`: flags, progress, CSV, plot, demo).

#[path = "train_resume_support/args.rs"]
mod args;
mod common;
#[path = "train_resume_support/demo.rs"]
mod demo;

use std::error::Error;
use std::process::ExitCode;

use nn_mini::train::{Trainer, TrainingRun};
use nn_mini::Checkpoint;

use args::Args;
use common::elastic::{self, save_due};
use common::flags::check_same;
use common::outputs;
use common::report::Report;
use common::run::{checkpoint_path, exit_code, last_step, Progress, LOG_EVERY};

fn main() -> ExitCode {
    let args = Args::parse_or_exit();
    args.run.apply_switches();
    exit_code(if args.demo {
        demo::run(&args)
    } else {
        run(&args)
    })
}

fn run(args: &Args) -> Result<ExitCode, Box<dyn Error>> {
    let flags = &args.run;

    // 0. Before anything else, check every path the run writes (and --compare, which
    //    it reads at the end): a bad one is an error now, not after the training.
    outputs::check(flags)?;
    let dir = elastic::checkpoint_dir(flags);

    // 1. Start fresh from the seed, or pick up a checkpoint: the one --resume names, or
    //    with --resume-latest the newest in --checkpoint-dir that loads (none there: a
    //    first start). A resume takes every setting from the checkpoint; flags may only
    //    repeat them (or change the worker count, which never changes a number, or the
    //    device, which keeps the random streams but rounds matmul and exp differently:
    //    see TrainConfig).
    let saved = match (&flags.resume, &dir) {
        (Some(path), _) => Some((
            path.clone(),
            Checkpoint::load(path)
                .map_err(|e| format!("cannot resume from {}: {e}", path.display()))?,
        )),
        (None, Some(dir)) if flags.resume_latest => dir.latest()?.map(|latest| {
            elastic::warn_skipped(&latest.skipped);
            (latest.path, latest.checkpoint)
        }),
        _ => None,
    };
    let mut trainer = match &saved {
        None => {
            let config = flags.train_config(args.device.unwrap_or_default());
            // Like torch.manual_seed: the loop itself draws from its own generators, but
            // anything around it that uses the default generator is reproducible too.
            rng_gen::manual_seed(config.seed);
            Trainer::new(config)?
        }
        Some((path, ck)) => {
            let saved = Trainer::config_of(ck)?;
            check_same::<Args, _>("--seed", flags.seed, saved.seed)?;
            check_same::<Args, _>("--batch-size", flags.batch_size, saved.batch_size)?;
            let trainer = Trainer::from_checkpoint(ck, flags.workers, args.device)
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
    trainer.set_cuda_graph(args.cuda_graph)?;
    let done = trainer.step_count();
    let steps = last_step::<Args>(flags, done)?;
    let c = trainer.config();
    println!(
        "seed {} | MLP {:?} | dropout {} | SGD lr {} momentum {} | batch {} | workers {} | {}",
        c.seed, c.layers, c.dropout, c.lr, c.momentum, c.batch_size, c.num_workers, c.device
    );
    if let tensor_core::Device::Cuda(ordinal) = c.device {
        // The driver's name for the device, so that a log of a run on the host-executed
        // CUDA stand-in (docs/cuda-standin.md) never passes for a GPU run.
        let name = tensor_core::cuda::get_device_name(ordinal)?;
        println!("{}: {name}", c.device);
    }

    // 2. Train. `trainer.step_deferred()` is one SGD step: the loader's next batch,
    //    zero_grad, forward with dropout, cross-entropy, backward, SGD update (read it
    //    in crates/nn-mini/src/train/trainer.rs). Its loss stays on the device until
    //    `read_losses` brings every pending one over in one copy (`--log-every`), so a
    //    GPU is not waited for in each step; each loss read goes to the CSV at once.
    //    With `--cuda-graph` the step after the first is captured as a CUDA graph and
    //    replayed (same losses, one launch a step). `--checkpoint-dir` saves every
    //    `--save-every` steps and at the last; `--save-at` checkpoints after that step
    //    and stops, as if the job had been killed there.
    let csv = elastic::open_csv(flags, trainer.losses())?;
    let mut progress = Progress::new(flags, steps, csv);
    let log_every = args.log_every.unwrap_or(LOG_EVERY);
    while trainer.step_count() < steps {
        trainer.step_deferred()?;
        let step = trainer.step_count();
        if step.is_multiple_of(log_every) || step == steps || Some(step) == flags.save_at {
            let first = step + 1 - trainer.unread_losses() as u64;
            for (k, &loss) in (first..).zip(trainer.read_losses()?) {
                if let Some(line) = progress.record(k, loss)? {
                    println!("{line}");
                }
            }
        }
        if let Some(dir) = dir.as_ref().filter(|_| save_due(flags, step, steps)) {
            let saved = dir.save(&trainer.checkpoint()?, step)?;
            println!("{}", elastic::saved_line(&saved, step));
        }
        if Some(step) == flags.save_at {
            let path = checkpoint_path(flags);
            trainer.save(&path)?;
            println!("saved {} after step {step}; stopping here", path.display());
            break;
        }
    }
    if done == steps {
        println!("the run had finished: step {done} of {steps}; nothing left to train");
    }

    // 3. Compare this run's rows with another run step for step and bit for bit, and
    //    plot the whole history (restored steps included) over it.
    let rows = elastic::report_rows(flags, &progress.rows, trainer.losses());
    Report::of(flags).finish(&rows, trainer.losses(), saved.map(|_| done))
}
