//! `--demo`: the world-size story in four runs of this program on the threads backend,
//! all with `--invariant`: one rank, four ranks, four ranks killed at a checkpoint, and
//! a resume of that checkpoint on two ranks. Every curve is compared with the first.

use std::path::Path;
use std::process::{Command, ExitCode};

use clap::ValueEnum;

use super::args::Args;

/// Runs `ddp_train` with `args` as a child process, echoing the command line.
fn run_child(exe: &Path, args: &[String]) -> Result<i32, Box<dyn std::error::Error>> {
    println!("\n$ ddp_train {}", args.join(" "));
    let status = Command::new(exe).args(args).status()?;
    Ok(status.code().unwrap_or(3))
}

pub fn run(args: &Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let flags = &args.run;
    let exe = std::env::current_exe()?;
    let steps = flags.steps.unwrap_or(100);
    let save_at = flags.save_at.unwrap_or(steps / 2).max(1);
    if save_at >= steps {
        return Err(format!(
            "--demo needs --save-at before the last step, got {save_at} of {steps}"
        )
        .into());
    }
    let dir = std::env::temp_dir().join(format!("ditto-ddp-train-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = |name: &str| -> String { dir.join(name).display().to_string() };
    let checkpoint = flags
        .checkpoint
        .as_ref()
        .map_or_else(|| file("w4.safetensors"), |p| p.display().to_string());

    let mut common = vec![
        "--invariant".to_string(),
        "--steps".into(),
        steps.to_string(),
    ];
    if let Some(shards) = args.micro_shards {
        common.extend(["--micro-shards".into(), shards.to_string()]);
    }
    if let Some(workers) = flags.workers {
        common.extend(["--workers".into(), workers.to_string()]);
    }
    if let Some(mode) = flags.deterministic.and_then(|m| m.to_possible_value()) {
        common.extend(["--deterministic".into(), mode.get_name().to_string()]);
    }
    let mut fresh = common.clone();
    fresh.extend(["--seed".into(), flags.seed.unwrap_or(0).to_string()]);
    if let Some(batch_size) = flags.batch_size {
        fresh.extend(["--batch-size".into(), batch_size.to_string()]);
    }
    let with = |base: &[String], extra: &[&str]| -> Vec<String> {
        base.iter()
            .cloned()
            .chain(extra.iter().map(|s| s.to_string()))
            .collect()
    };

    println!("== 1/4: {steps} steps on 1 rank");
    let a = file("w1.csv");
    if run_child(&exe, &with(&fresh, &["--world-size", "1", "--out", &a]))? != 0 {
        return Ok(ExitCode::from(3));
    }
    println!("\n== 2/4: the same run on 4 ranks, compared with 1 rank");
    let b = file("w4.csv");
    let same_on_4 = run_child(
        &exe,
        &with(&fresh, &["--world-size", "4", "--out", &b, "--compare", &a]),
    )?;
    println!("\n== 3/4: 4 ranks, killed after step {save_at} (checkpoint written by rank 0)");
    let saved = with(
        &fresh,
        &[
            "--world-size",
            "4",
            "--save-at",
            &save_at.to_string(),
            "--checkpoint",
            &checkpoint,
        ],
    );
    if run_child(&exe, &saved)? != 0 {
        return Ok(ExitCode::from(3));
    }
    println!("\n== 4/4: resume that checkpoint on 2 ranks, compared with 1 rank");
    let mut resumed = with(
        &common,
        &[
            "--world-size",
            "2",
            "--resume",
            &checkpoint,
            "--out",
            &file("w4-to-w2.csv"),
            "--compare",
            &a,
        ],
    );
    // The loss curves of the resumed run over the first run's, next to the CSVs.
    let png = match (&flags.plot, flags.no_plot) {
        (_, true) => None,
        (Some(path), false) => Some(path.display().to_string()),
        (None, false) => Some(file("loss.png")),
    };
    if let Some(png) = &png {
        resumed.extend(["--plot".into(), png.clone()]);
    }
    let resumed_same = run_child(&exe, &resumed)?;
    println!("\n(files in {})", dir.display());
    // Status 0 or 1: the resumed run got as far as its report, so the PNG is there.
    if let Some(png) = png.filter(|_| resumed_same <= 1) {
        println!("loss curves: {png}");
    }
    let all_same = same_on_4 == 0 && resumed_same == 0;
    println!(
        "1 rank, 4 ranks and 4 -> 2 ranks identical: {}",
        if all_same { "yes" } else { "no" }
    );
    Ok(if all_same {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
