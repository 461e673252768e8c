//! `--demo` of `ddp_train`: the world-size story in four runs of this program on the
//! threads backend, all with `--invariant`: one rank, four ranks, four ranks killed at
//! a checkpoint, and a resume of that checkpoint on two ranks. Every curve is compared
//! with the first (the plumbing is `examples/common/demo.rs`).

use std::error::Error;
use std::process::ExitCode;

use super::args::Args;
use crate::common::demo::{fresh_flags, save_at, shared_flags, with, Demo};

pub fn run(args: &Args) -> Result<ExitCode, Box<dyn Error>> {
    let flags = &args.run;
    let steps = flags.steps.unwrap_or(100);
    let save_at = save_at(flags, steps, steps / 2)?;
    let demo = Demo::new("ddp_train", flags)?;
    let checkpoint = flags
        .checkpoint
        .as_ref()
        .map_or_else(|| demo.file("w4.safetensors"), |p| p.display().to_string());
    let mut invariant = vec!["--invariant".to_string()];
    if let Some(shards) = args.ddp.micro_shards {
        invariant.extend(["--micro-shards".into(), shards.to_string()]);
    }
    let shared = [invariant.clone(), shared_flags(flags, steps)].concat();
    let fresh = [invariant, fresh_flags(flags, steps)].concat();
    let (w1, w4) = (demo.file("w1.csv"), demo.file("w4.csv"));

    println!("== 1/4: {steps} steps on 1 rank");
    if demo.run(&with(&fresh, &["--world-size", "1", "--out", &w1]))? != 0 {
        return Ok(ExitCode::from(3));
    }
    println!("\n== 2/4: the same run on 4 ranks, compared with 1 rank");
    let on_4 = ["--world-size", "4", "--out", &w4, "--compare", &w1];
    let same_on_4 = demo.run(&with(&fresh, &on_4))?;
    println!("\n== 3/4: 4 ranks, killed after step {save_at} (checkpoint written by rank 0)");
    let killed = [
        "--world-size",
        "4",
        "--save-at",
        &save_at.to_string(),
        "--checkpoint",
        &checkpoint,
    ];
    if demo.run(&with(&fresh, &killed))? != 0 {
        return Ok(ExitCode::from(3));
    }
    println!("\n== 4/4: resume that checkpoint on 2 ranks, compared with 1 rank");
    let w4_to_w2 = demo.file("w4-to-w2.csv");
    let resumed = [
        "--world-size",
        "2",
        "--resume",
        &checkpoint,
        "--out",
        &w4_to_w2,
        "--compare",
        &w1,
    ];
    let resumed_same = demo.run(&[with(&shared, &resumed), demo.plot_flags()].concat())?;
    demo.finish(resumed_same);
    let all_same = same_on_4 == 0 && resumed_same == 0;
    println!(
        "1 rank, 4 ranks and 4 -> 2 ranks identical: {}",
        if all_same { "yes" } else { "no" }
    );
    Ok(ExitCode::from(if all_same { 0 } else { 1 }))
}
