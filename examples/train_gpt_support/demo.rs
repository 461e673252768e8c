//! `--demo` of `train_gpt`: the whole reproducibility story, by running this program
//! three times (the plumbing is `examples/common/demo.rs`): straight, killed at a
//! checkpoint, resumed and compared.

use std::error::Error;
use std::process::ExitCode;

use super::args::Args;
use crate::common::demo::{fresh_flags, push_flag, save_at, shared_flags, Demo};

/// The demo's steps by default: 100 straight, 60 then 40 resumed, about 40 s of CPU time
/// for the three runs on the 2-core machine of benches/RESULTS.md.
pub const DEMO_STEPS: u64 = 100;

/// The flags of every run that are `train_gpt`'s own and that a resume repeats
/// (`--device`, the data parallel flags, `--data`, evaluation).
fn own_flags(args: &Args) -> Vec<String> {
    let mut out = Vec::new();
    push_flag(&mut out, "--device", args.device);
    push_flag(&mut out, "--backend", args.ddp.backend.map(|_| "threads"));
    push_flag(&mut out, "--world-size", args.ddp.world_size);
    push_flag(&mut out, "--micro-shards", args.ddp.micro_shards);
    push_flag(&mut out, "--data", args.data.as_ref().map(|p| p.display()));
    push_flag(&mut out, "--eval-interval", args.nano.eval_interval);
    push_flag(&mut out, "--eval-iters", args.nano.eval_iters);
    if args.ddp.invariant {
        out.push("--invariant".into());
    }
    out
}

/// What the last run does at its end (the sample's flags); the first two runs generate
/// nothing (`--sample 0`).
fn finish_flags(args: &Args) -> Vec<String> {
    let mut out = Vec::new();
    push_flag(&mut out, "--sample", args.sample);
    push_flag(&mut out, "--prompt", args.prompt.as_ref());
    out
}

/// The model and optimiser flags a fresh run takes (a resume reads them from its
/// checkpoint).
fn model_flags(args: &Args) -> Vec<String> {
    let mut out = Vec::new();
    push_flag(&mut out, "--layers", args.layers);
    push_flag(&mut out, "--heads", args.heads);
    push_flag(&mut out, "--width", args.width);
    push_flag(&mut out, "--block-size", args.block_size);
    push_flag(&mut out, "--context", args.context);
    push_flag(&mut out, "--dropout", args.dropout);
    push_flag(&mut out, "--lr", args.lr);
    push_flag(&mut out, "--weight-decay", args.weight_decay);
    push_flag(&mut out, "--warmup", args.warmup);
    push_flag(&mut out, "--grad-clip", args.grad_clip);
    push_flag(&mut out, "--beta2", args.nano.beta2);
    push_flag(&mut out, "--min-lr", args.nano.min_lr);
    push_flag(&mut out, "--decay-steps", args.nano.decay_steps);
    push_flag(&mut out, "--bias", args.nano.bias);
    push_flag(&mut out, "--val-fraction", args.nano.val_fraction);
    out
}

/// Three runs of [`DEMO_STEPS`] steps unless `--steps` says otherwise
/// ([`Demo::straight_killed_resumed`]).
pub fn run(args: &Args) -> Result<ExitCode, Box<dyn Error>> {
    let flags = &args.run;
    let steps = flags.steps.unwrap_or(DEMO_STEPS);
    let save_at = save_at(flags, steps, steps * 3 / 5)?;
    let demo = Demo::new("train_gpt", flags)?;
    let checkpoint = flags.checkpoint.as_ref().map_or_else(
        || demo.file("checkpoint.safetensors"),
        |p| p.display().to_string(),
    );
    let own = own_flags(args);
    let resume = [shared_flags(flags, steps), own.clone(), finish_flags(args)].concat();
    let quiet = ["--sample".to_string(), "0".to_string()];
    let fresh = [
        fresh_flags(flags, steps),
        own,
        model_flags(args),
        quiet.into(),
    ]
    .concat();
    demo.straight_killed_resumed(steps, save_at, &checkpoint, &fresh, &resume)
}
