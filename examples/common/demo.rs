//! What both `--demo`s do around their story: run this program again as child
//! processes (a resume must happen in a fresh process to prove anything), in a folder
//! of their own, with the run's shared flags passed on, and the loss-curve PNG at the
//! end.

use std::error::Error;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use clap::ValueEnum;

use super::flags::RunFlags;

/// A demo in progress: the program to rerun and the folder its files go to.
pub struct Demo {
    name: &'static str,
    exe: PathBuf,
    dir: PathBuf,
    /// The PNG the last run draws (`None` with `--no-plot`).
    png: Option<String>,
}

impl Demo {
    /// The demo of program `name`, its files in `$TMPDIR/ditto-<name>-<pid>/`
    /// (`ditto-train-resume-4242/`).
    pub fn new(name: &'static str, flags: &RunFlags) -> Result<Self, Box<dyn Error>> {
        let folder = format!("ditto-{}-{}", name.replace('_', "-"), std::process::id());
        let dir = std::env::temp_dir().join(folder);
        std::fs::create_dir_all(&dir)?;
        let png = match (&flags.plot, flags.no_plot) {
            (_, true) => None,
            (Some(path), false) => Some(path.display().to_string()),
            (None, false) => Some(dir.join("loss.png").display().to_string()),
        };
        Ok(Demo {
            name,
            exe: std::env::current_exe()?,
            dir,
            png,
        })
    }

    /// The path of `name` in the demo's folder.
    pub fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// Runs this program with `args` as a child process, echoing the command line;
    /// returns its exit status.
    pub fn run(&self, args: &[String]) -> Result<i32, Box<dyn Error>> {
        println!("\n$ {} {}", self.name, args.join(" "));
        let status = Command::new(&self.exe).args(args).status()?;
        Ok(status.code().unwrap_or(3))
    }

    /// `--plot PNG` for the run that draws the curves, or nothing with `--no-plot`.
    pub fn plot_flags(&self) -> Vec<String> {
        self.png
            .iter()
            .flat_map(|png| ["--plot".to_string(), png.clone()])
            .collect()
    }

    /// The story of both single-process demos, in three runs of this program: `fresh`
    /// (a fresh run's flags) straight to `a.csv`; the same run killed after step
    /// `save_at` with a checkpoint written to `checkpoint`; a resume from it in a new
    /// process with the flags `resume`, compared with `a.csv` step for step and drawn
    /// over it. Its exit status is the comparison's (3 when a run failed).
    #[allow(
        dead_code,
        reason = "ddp_train's demo tells its own story, in four runs"
    )]
    pub fn straight_killed_resumed(
        &self,
        steps: u64,
        save_at: u64,
        checkpoint: &str,
        fresh: &[String],
        resume: &[String],
    ) -> Result<ExitCode, Box<dyn Error>> {
        let (a, b, c) = (self.file("a.csv"), self.file("b.csv"), self.file("c.csv"));
        println!("== 1/3: a straight run of {steps} steps");
        if self.run(&with(fresh, &["--out", &a]))? != 0 {
            return Ok(ExitCode::from(3));
        }
        println!("\n== 2/3: the same run, killed after step {save_at} (checkpoint written)");
        let save_at = save_at.to_string();
        let killed = [
            "--save-at",
            &save_at,
            "--checkpoint",
            checkpoint,
            "--out",
            &b,
        ];
        if self.run(&with(fresh, &killed))? != 0 {
            return Ok(ExitCode::from(3));
        }
        println!("\n== 3/3: resume from the checkpoint in a new process, compare with run 1");
        let resumed = ["--resume", checkpoint, "--out", &c, "--compare", &a];
        let code = self.run(&[with(resume, &resumed), self.plot_flags()].concat())?;
        self.finish(code);
        Ok(ExitCode::from(u8::try_from(code).unwrap_or(3)))
    }

    /// Says where the files are; `last` is the exit status of the run that drew the
    /// PNG (0 or 1: it got as far as its report, so the PNG is there).
    pub fn finish(&self, last: i32) {
        println!("\n(files in {})", self.dir.display());
        if let Some(png) = self.png.as_ref().filter(|_| last <= 1) {
            println!("loss curves: {png}");
        }
    }
}

/// `--save-at` of a demo: the one given or `default`, checked to fall before the end.
pub fn save_at(flags: &RunFlags, steps: u64, default: u64) -> Result<u64, Box<dyn Error>> {
    let save_at = flags.save_at.unwrap_or(default).max(1);
    if save_at >= steps {
        return Err(format!(
            "--demo needs --save-at before the last step, got {save_at} of {steps}"
        )
        .into());
    }
    Ok(save_at)
}

/// The flags every run of a demo repeats (`--workers`, `--deterministic`, `--portable`), after
/// `--steps steps`; a resume takes the rest from its checkpoint.
pub fn shared_flags(flags: &RunFlags, steps: u64) -> Vec<String> {
    let mut args = vec!["--steps".to_string(), steps.to_string()];
    push_flag(&mut args, "--workers", flags.workers);
    if let Some(mode) = flags.deterministic.and_then(|m| m.to_possible_value()) {
        args.extend(["--deterministic".into(), mode.get_name().to_string()]);
    }
    if flags.portable {
        args.push("--portable".into());
    }
    args
}

/// [`shared_flags`] plus what starts a run from scratch (`--seed`, `--batch-size`).
pub fn fresh_flags(flags: &RunFlags, steps: u64) -> Vec<String> {
    let mut args = shared_flags(flags, steps);
    args.extend(["--seed".into(), flags.seed.unwrap_or(0).to_string()]);
    push_flag(&mut args, "--batch-size", flags.batch_size);
    args
}

/// Appends `--name value` to `args` when `value` is given.
pub fn push_flag(args: &mut Vec<String>, name: &str, value: Option<impl ToString>) {
    if let Some(value) = value {
        args.extend([name.to_string(), value.to_string()]);
    }
}

/// `base` followed by `extra`.
pub fn with(base: &[String], extra: &[&str]) -> Vec<String> {
    base.iter()
        .cloned()
        .chain(extra.iter().map(|s| s.to_string()))
        .collect()
}
