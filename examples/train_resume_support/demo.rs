//! `--demo` of `train_resume`: the whole reproducibility story, by running this
//! program three times (the plumbing is `examples/common/demo.rs`).

use std::error::Error;
use std::process::ExitCode;

use super::args::Args;
use crate::common::demo::{fresh_flags, push_flag, save_at, shared_flags, Demo};

/// Three runs: a straight one to `a.csv`; the same run killed after step k with a
/// checkpoint; a resume from that checkpoint in a new process, compared with `a.csv`
/// step for step and drawn over it.
pub fn run(args: &Args) -> Result<ExitCode, Box<dyn Error>> {
    let flags = &args.run;
    let steps = flags.last_step();
    let save_at = save_at(flags, steps, steps * 3 / 5)?;
    let demo = Demo::new("train_resume", flags)?;
    let checkpoint = flags.checkpoint.as_ref().map_or_else(
        || demo.file("checkpoint.safetensors"),
        |p| p.display().to_string(),
    );
    let mut device = Vec::new();
    push_flag(&mut device, "--device", args.device);
    let shared = [shared_flags(flags, steps), device.clone()].concat();
    let fresh = [fresh_flags(flags, steps), device].concat();
    demo.straight_killed_resumed(steps, save_at, &checkpoint, &fresh, &shared)
}
