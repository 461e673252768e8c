//! `--demo` of `train_resume`: the whole reproducibility story, by running this
//! program three times (the plumbing is `examples/common/demo.rs`).

use std::error::Error;
use std::process::ExitCode;

use super::args::Args;
use crate::common::demo::{fresh_flags, save_at, shared_flags, with, Demo};

/// Three runs: a straight one to `a.csv`; the same run killed after step k with a
/// checkpoint; a resume from that checkpoint in a new process, compared with `a.csv`
/// step for step and drawn over it.
pub fn run(args: &Args) -> Result<ExitCode, Box<dyn Error>> {
    let flags = &args.run;
    let steps = flags.steps.unwrap_or(200);
    let save_at = save_at(flags, steps, steps * 3 / 5)?;
    let demo = Demo::new("train_resume", flags)?;
    let checkpoint = flags.checkpoint.as_ref().map_or_else(
        || demo.file("checkpoint.safetensors"),
        |p| p.display().to_string(),
    );
    let device: Vec<String> = args
        .device
        .iter()
        .flat_map(|d| ["--device".to_string(), d.to_string()])
        .collect();
    let shared = [shared_flags(flags, steps), device.clone()].concat();
    let fresh = [fresh_flags(flags, steps), device].concat();
    let (a, b, c) = (demo.file("a.csv"), demo.file("b.csv"), demo.file("c.csv"));

    println!("== 1/3: a straight run of {steps} steps");
    if demo.run(&with(&fresh, &["--out", &a]))? != 0 {
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
    if demo.run(&with(&fresh, &killed))? != 0 {
        return Ok(ExitCode::from(3));
    }

    println!("\n== 3/3: resume from the checkpoint in a new process, compare with run 1");
    let resumed = ["--resume", &checkpoint, "--out", &c, "--compare", &a];
    let code = demo.run(&[with(&shared, &resumed), demo.plot_flags()].concat())?;
    demo.finish(code);
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(3)))
}
