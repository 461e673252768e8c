//! `--demo`: the whole reproducibility story, by running this program three times.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::ValueEnum;

use super::args::Args;

/// Runs `train_resume` with `args` as a child process, echoing the command line.
fn run_child(exe: &Path, args: &[String]) -> Result<i32, Box<dyn std::error::Error>> {
    println!("\n$ train_resume {}", args.join(" "));
    let status = Command::new(exe).args(args).status()?;
    Ok(status.code().unwrap_or(3))
}

/// 1. a straight run to `a.csv`; 2. the same run killed after step k with a checkpoint;
/// 3. a resume from that checkpoint, compared with `a.csv` step for step.
pub fn run(args: &Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let device = args.device;
    let args = &args.run;
    let exe = std::env::current_exe()?;
    let steps = args.steps.unwrap_or(200);
    let save_at = args.save_at.unwrap_or(steps * 3 / 5).max(1);
    if save_at >= steps {
        return Err(format!(
            "--demo needs --save-at before the last step, got {save_at} of {steps}"
        )
        .into());
    }
    let dir = std::env::temp_dir().join(format!("ditto-train-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = |name: &str| -> String { dir.join(name).display().to_string() };
    let checkpoint = args
        .checkpoint
        .clone()
        .unwrap_or_else(|| PathBuf::from(file("checkpoint.safetensors")));
    let checkpoint = checkpoint.display().to_string();

    let mut common = vec!["--steps".to_string(), steps.to_string()];
    for (flag, value) in [
        ("--workers", args.workers.map(|w| w.to_string())),
        ("--device", device.map(|d| d.to_string())),
        (
            "--deterministic",
            args.deterministic
                .and_then(|m| m.to_possible_value())
                .map(|v| v.get_name().to_string()),
        ),
    ] {
        if let Some(value) = value {
            common.extend([flag.to_string(), value]);
        }
    }
    let mut fresh = common.clone();
    fresh.extend(["--seed".to_string(), args.seed.unwrap_or(0).to_string()]);
    if let Some(batch_size) = args.batch_size {
        fresh.extend(["--batch-size".to_string(), batch_size.to_string()]);
    }

    println!("== 1/3: a straight run of {steps} steps");
    let mut straight = fresh.clone();
    straight.extend(["--out".into(), file("a.csv")]);
    if run_child(&exe, &straight)? != 0 {
        return Ok(ExitCode::from(3));
    }

    println!("\n== 2/3: the same run, killed after step {save_at} (checkpoint written)");
    let mut killed = fresh;
    killed.extend([
        "--save-at".into(),
        save_at.to_string(),
        "--checkpoint".into(),
        checkpoint.clone(),
        "--out".into(),
        file("b.csv"),
    ]);
    if run_child(&exe, &killed)? != 0 {
        return Ok(ExitCode::from(3));
    }

    println!("\n== 3/3: resume from the checkpoint in a new process, compare with run 1");
    let mut resumed = common;
    resumed.extend([
        "--resume".into(),
        checkpoint,
        "--out".into(),
        file("c.csv"),
        "--compare".into(),
        file("a.csv"),
    ]);
    // The loss curves of the resumed run over the first run's, next to the CSVs.
    let png = match (&args.plot, args.no_plot) {
        (_, true) => None,
        (Some(path), false) => Some(path.display().to_string()),
        (None, false) => Some(file("loss.png")),
    };
    if let Some(png) = &png {
        resumed.extend(["--plot".into(), png.clone()]);
    }
    let code = run_child(&exe, &resumed)?;
    println!("\n(files in {})", dir.display());
    // Status 0 or 1: the resumed run got as far as its report, so the PNG is there.
    if let Some(png) = png.filter(|_| code <= 1) {
        println!("loss curves: {png}");
    }
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(3)))
}
