//! # train_gpt: a small GPT, killed, resumed, and the same loss curve bit for bit
//!
//! GPT-2's layout (pre-LayerNorm blocks of causal self-attention and a GELU MLP, a final
//! layer norm, the output head tied to the token embedding; nanoGPT's parameter names)
//! at 4 layers, 4 heads, width 128 and context 64, trained on the bytes of a text
//! (Jane Austen's Emma, `data/emma.txt`, by default) with AdamW (lr 1e-3, betas (0.9,
//! 0.95), weight decay 0.1 on the weight matrices), 100 warm-up steps, a cosine decay
//! and gradient clipping at 1.0, dropout 0.1 on the embeddings, the attention
//! probabilities and every residual branch. Everything random (init, every dropout
//! mask, the windows of text) derives from `--seed` through `fold_in`, and everything
//! stateful (weights, AdamW's moments and step counts, generators, loader position,
//! step, loss history) goes into one safetensors checkpoint. So:
//!
//! ```text
//! cargo run --release --example train_gpt -- --seed 7 --steps 200 --out a.csv
//! cargo run --release --example train_gpt -- --seed 7 --steps 200 --save-at 120 \
//!     --checkpoint ck.safetensors --out b.csv
//! cargo run --release --example train_gpt -- --resume ck.safetensors --steps 200 \
//!     --out c.csv --compare a.csv          # prints `identical: yes`
//! cargo run --release --example train_gpt -- --demo   # all three, and a loss-curve PNG
//! cargo run --release --example train_gpt -- --backend threads --world-size 4 \
//!     --invariant --steps 200 --out w4.csv # data parallel: the same bytes as 1 rank
//! ```
//!
//! With `--checkpoint-dir ck --save-every N --resume-latest` the same command line
//! serves a job's first start and every restart, at any world size in invariant mode
//! (`common/elastic.rs`).
//!
//! Read `main` and `run_rank` top to bottom: the loop is `train_resume`'s, with the GPT
//! run (`nn_mini::gpt`) in place of the MLP, and `ddp_train`'s launch when
//! `--backend` asks for ranks; `common/` holds what the three share.

#[path = "train_gpt_support/args.rs"]
mod args;
mod common;
#[path = "train_gpt_support/demo.rs"]
mod demo;
#[path = "train_gpt_support/finish.rs"]
mod finish;
#[path = "train_gpt_support/session.rs"]
mod session;

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;

use distributed::ProcessGroup;
use nn_mini::gpt::GptTrainConfig;

use args::Args;
use common::ddp::{check_outputs_on_rank0, launch};
use common::elastic::{self, save_due};
use common::outputs;
use common::report::Report;
use common::run::{checkpoint_path, exit_code, last_step, Progress};
use session::Session;

fn main() -> ExitCode {
    let args = Args::parse_or_exit();
    args.run.apply_switches();
    exit_code(if args.demo {
        demo::run(&args)
    } else if let Some(backend) = args.ddp.backend {
        let batch = args
            .run
            .resume
            .is_none()
            .then(|| args.run.batch_size.unwrap_or(16));
        launch::<Args>(&args.ddp, backend, batch, "train_gpt", &|group| {
            run_rank(&args, Some(group))
        })
    } else {
        run_rank(&args, None)
    })
}

/// One run: a single process (`group` is `None`) or one rank of a data parallel job.
/// Every rank trains; rank 0 also talks and writes.
fn run_rank(args: &Args, group: Option<Arc<dyn ProcessGroup>>) -> Result<ExitCode, Box<dyn Error>> {
    let flags = &args.run;
    let rank = group.as_ref().map_or(0, |g| g.rank());
    let say = |line: String| {
        if rank == 0 {
            println!("{line}");
        }
    };

    // 0. Before anything else, rank 0 (the only one that writes) checks every path the
    //    run writes (and --compare, which it reads at the end): a bad one is an error
    //    on every rank now, not after the training.
    match &group {
        Some(group) => check_outputs_on_rank0(flags, &**group)?,
        None => outputs::check(flags)?,
    }
    let dir = elastic::checkpoint_dir(flags);

    // 1. Start fresh from the seed, or pick up a checkpoint: the one --resume names, or
    //    with --resume-latest the newest in --checkpoint-dir that loads (see
    //    session.rs: which flags a resume may repeat, and where it finds the text).
    let (mut run, resumed_from) = Session::start(args, group, dir.as_ref())?;
    let done = run.step_count();
    let steps = last_step::<Args>(flags, done)?;
    say(describe(run.config(), &run.placement()));

    // 2. Train. `run.step()` is one step: the loader's next windows, forward with
    //    dropout, next-token cross-entropy, backward, gradients summed across ranks
    //    (data parallel), clipping, the scheduled learning rate, AdamW (read it in
    //    crates/nn-mini/src/gpt/run.rs). A NaN loss or gradient norm stops the run with
    //    the step it appeared at. Rank 0 appends each loss to the CSV.
    //    `--checkpoint-dir` saves every `--save-every` steps and at the last; `--save-at`
    //    checkpoints after that step and stops.
    let csv = match rank {
        0 => elastic::open_csv(flags, run.losses())?,
        _ => None,
    };
    let mut progress = Progress::new(flags, steps, csv);
    while run.step_count() < steps {
        let loss = run.step()?;
        let step = run.step_count();
        if let Some(line) = progress.record(step, loss)? {
            say(line);
        }
        if let Some(dir) = dir.as_ref().filter(|_| save_due(flags, step, steps)) {
            if let Some(saved) = run.save_in(dir)? {
                say(elastic::saved_line(&saved, step));
            }
        }
        if Some(step) == flags.save_at {
            let path = checkpoint_path(flags);
            run.save(&path)?;
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

    // 3. Rank 0: the comparison and the plot; then the held-out loss and a sample of
    //    generated text, when asked for and the run reached its end.
    let rows = elastic::report_rows(flags, &progress.rows, run.losses());
    let code = Report::of(flags).finish(&rows, run.losses(), resumed_from.map(|_| done))?;
    if run.step_count() == steps {
        finish::evaluate_and_sample(args, &mut run)?;
    }
    Ok(code)
}

/// The line describing the run.
fn describe(c: &GptTrainConfig, placement: &str) -> String {
    let m = &c.model;
    format!(
        "seed {} | GPT {} layers x {} heads x width {}, context {} | dropout {} | AdamW lr {} betas ({}, {}) wd {} | warm-up {} then cosine to {} after {} steps | clip {} | batch {} | {} ({} bytes) | {placement}",
        c.seed,
        m.n_layer,
        m.n_head,
        m.n_embd,
        c.context,
        m.dropout,
        c.optimizer.lr,
        c.optimizer.betas.0,
        c.optimizer.betas.1,
        c.optimizer.weight_decay,
        c.warmup,
        c.min_lr,
        c.decay_steps,
        c.grad_clip,
        c.batch_size,
        c.data.path,
        c.data.len,
    )
}
