//! `--demo` of `train_gpt`: the whole reproducibility story, by running this program
//! three times (the plumbing is `examples/common/demo.rs`): straight, killed at a
//! checkpoint, resumed and compared.

use std::error::Error;
use std::process::ExitCode;

use super::args::Args;
use crate::common::demo::{fresh_flags, save_at, shared_flags, with, Demo};

/// The demo's steps by default: 100 straight, 60 then 40 resumed, about 40 s of CPU time
/// for the three runs on the 2-core machine of benches/RESULTS.md.
pub const DEMO_STEPS: u64 = 100;

/// The flags of every run that are `train_gpt`'s own and that a resume repeats
/// (`--device`, the data parallel flags, `--data`).
fn own_flags(args: &Args) -> Vec<String> {
    let mut out = Vec::new();
    let mut flag = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            out.extend([name.to_string(), value]);
        }
    };
    flag("--device", args.device.map(|d| d.to_string()));
    flag("--backend", args.ddp.backend.map(|_| "threads".to_string()));
    flag("--world-size", args.ddp.world_size.map(|n| n.to_string()));
    flag(
        "--micro-shards",
        args.ddp.micro_shards.map(|n| n.to_string()),
    );
    flag(
        "--data",
        args.data.as_ref().map(|p| p.display().to_string()),
    );
    if args.ddp.invariant {
        out.push("--invariant".into());
    }
    out
}

/// What the last run does at its end (`--eval-text`, the sample's flags); the first two
/// runs generate nothing.
fn finish_flags(args: &Args) -> Vec<String> {
    let mut out = Vec::new();
    let mut flag = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            out.extend([name.to_string(), value]);
        }
    };
    flag(
        "--eval-text",
        args.eval_text.as_ref().map(|p| p.display().to_string()),
    );
    flag("--sample", args.sample.map(|n| n.to_string()));
    flag("--prompt", args.prompt.clone());
    out
}

/// The model and optimiser flags a fresh run takes (a resume reads them from its
/// checkpoint).
fn model_flags(args: &Args) -> Vec<String> {
    let mut out = Vec::new();
    let mut flag = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            out.extend([name.to_string(), value]);
        }
    };
    flag("--layers", args.layers.map(|n| n.to_string()));
    flag("--heads", args.heads.map(|n| n.to_string()));
    flag("--width", args.width.map(|n| n.to_string()));
    flag("--block-size", args.block_size.map(|n| n.to_string()));
    flag("--context", args.context.map(|n| n.to_string()));
    flag("--dropout", args.dropout.map(|p| p.to_string()));
    flag("--lr", args.lr.map(|x| x.to_string()));
    flag("--weight-decay", args.weight_decay.map(|x| x.to_string()));
    flag("--warmup", args.warmup.map(|n| n.to_string()));
    flag("--grad-clip", args.grad_clip.map(|x| x.to_string()));
    out
}

/// Three runs of [`DEMO_STEPS`] steps unless `--steps` says otherwise: a straight one
/// to `a.csv`; the same run killed after step k with a checkpoint; a resume from that
/// checkpoint in a new process, compared with `a.csv` step for step and drawn over it.
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
    let shared = [shared_flags(flags, steps), own.clone()].concat();
    let fresh = [fresh_flags(flags, steps), own, model_flags(args)].concat();
    let (a, b, c) = (demo.file("a.csv"), demo.file("b.csv"), demo.file("c.csv"));
    let quiet = ["--sample", "0"];

    println!("== 1/3: a straight run of {steps} steps");
    if demo.run(&with(&with(&fresh, &quiet), &["--out", &a]))? != 0 {
        return Ok(ExitCode::from(3));
    }

    println!("\n== 2/3: the same run, killed after step {save_at} (checkpoint written)");
    let killed = [
        "--save-at",
        &save_at.to_string(),
        "--checkpoint",
        &checkpoint,
        "--out",
        &b,
    ];
    if demo.run(&with(&with(&fresh, &quiet), &killed))? != 0 {
        return Ok(ExitCode::from(3));
    }

    println!("\n== 3/3: resume from the checkpoint in a new process, compare with run 1");
    let resumed = ["--resume", &checkpoint, "--out", &c, "--compare", &a];
    let last = [
        with(&shared, &resumed),
        finish_flags(args),
        demo.plot_flags(),
    ]
    .concat();
    let code = demo.run(&last)?;
    demo.finish(code);
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(3)))
}
