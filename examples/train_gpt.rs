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
//! Read `main` and `run` top to bottom: the loop is `train_resume`'s (`common/run.rs`),
//! with the GPT run (`nn_mini::gpt`) in place of the MLP, on one process
//! (`GptTrainer`) or, when `--backend` asks for ranks, on each rank of `ddp_train`'s
//! launch (`GptDdpTrainer`).

#[path = "train_gpt_support/args.rs"]
mod args;
mod common;
#[path = "train_gpt_support/demo.rs"]
mod demo;
#[path = "train_gpt_support/finish.rs"]
mod finish;
#[path = "train_gpt_support/recipe.rs"]
mod recipe;

use std::error::Error;
use std::process::ExitCode;

use distributed::{DdpPlace, GptDdpTrainer};
use nn_mini::gpt::{DataSpec, GptTrainConfig, GptTrainer, Text};
use nn_mini::train::{placed, Run};
use tensor_core::Device;

use args::Args;
use common::ddp::launch;
use common::run::{main_of, start, train, Place, Steps};
use finish::Evaluator;

fn main() -> ExitCode {
    let args = Args::parse_or_exit();
    let run_it = || match args.ddp.backend {
        None => run::<GptTrainer>(&args, &(), args.device.unwrap_or_default()),
        Some(backend) => {
            // A fresh run's global batch, checked against the world size first.
            let batch = args
                .run
                .resume
                .is_none()
                .then(|| args.run.batch_size.unwrap_or(16));
            launch::<Args>(&args.ddp, backend, batch, "train_gpt", &|group| {
                let device = group.device();
                let place = DdpPlace::new(group, args.ddp.asked_mode());
                run::<GptDdpTrainer>(&args, &place, device)
            })
        }
    };
    main_of(&args.run, args.demo, || demo::run(&args), run_it)
}

/// One run: a single process, or one rank of a data parallel job (`R`). Every rank
/// trains; rank 0 also talks and writes.
fn run<R>(args: &Args, place: &R::Place, device: Device) -> Result<ExitCode, Box<dyn Error>>
where
    R: Run<Config = GptTrainConfig>,
    R::Place: Place,
{
    let flags = &args.run;

    // 1. Start fresh from the seed and the text, or pick up a checkpoint: it names its
    //    text by path, length and SHA-256; `--data` says where the same bytes lie now.
    //    The text read here stays alive until the run has its own, which then shares
    //    its bytes (`Text::read`): one copy of a large text, not two.
    let mut text = None;
    let fresh = || {
        let read = text.insert(Text::read(args.data_path())?);
        let data = DataSpec::of(args.data_path(), read);
        Ok(args.train_config(data, device, flags.last_step()))
    };
    let data = args.data.as_ref().map(|d| d.display().to_string());
    let mut place_it = placed(args.device, flags.workers);
    let adjust = |config: &mut GptTrainConfig| {
        place_it(config);
        if let Some(data) = &data {
            config.data.path.clone_from(data);
        }
    };
    let started = start::<R, Args>(flags, place, fresh, adjust)?;
    drop(text);
    let resumed = started.resumed_from.is_some();
    let mut evaluator = Evaluator::new(args, started.run.config(), resumed)?;

    // --eval-only: the checkpoint's train and val losses (and a sample), no training.
    if args.nano.eval_only {
        let mut run = started.run;
        let step = run.step_count();
        evaluator.evaluate(&mut run, step)?;
        if run.rank() == 0 {
            let config = run.config().clone();
            finish::sample(args, &config, run.model_mut(), 0)?;
        }
        return Ok(ExitCode::SUCCESS);
    }

    // 2. Train: each step is the loader's next windows, forward with dropout,
    //    next-token cross-entropy, backward, gradients summed across ranks (data
    //    parallel), clipping, the scheduled learning rate, AdamW (read it in
    //    crates/nn-mini/src/gpt/run.rs). A NaN loss or gradient norm stops the run with
    //    the step it appeared at. Every --eval-interval steps, the held-out loss
    //    (train_gpt_support/finish.rs), which draws from no stream of the run.
    let steps = Steps {
        read_every: 1,
        cuda_graph: args.cuda_graph,
        val_column: evaluator.is_on(),
    };
    let (mut run, code) = train::<R, Args>(started, flags, &steps, describe, &mut |run, step| {
        evaluator.evaluate_due(run, step, flags.last_step())
    })?;

    // 3. Rank 0, at the run's end: a sample of generated text.
    if run.rank() == 0 && run.step_count() == flags.last_step() {
        let config = run.config().clone();
        finish::sample(args, &config, run.model_mut(), 200)?;
    }
    Ok(code)
}

/// The line describing the run.
fn describe<R: Run<Config = GptTrainConfig>>(run: &R) -> String {
    let (c, placement) = (run.config(), run.placement());
    let m = &c.model;
    format!(
        "seed {} | GPT {} layers x {} heads x width {}, context {}, bias {}, {} | dropout {} | AdamW lr {} betas ({}, {}) wd {} | warm-up {} then cosine to {} after {} steps | clip {} | batch {} | {} ({} bytes, {} held out) | {placement}",
        c.seed,
        m.n_layer,
        m.n_head,
        m.n_embd,
        c.context,
        m.bias,
        m.precision,
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
        c.data.len - c.train_bytes(),
    )
}
