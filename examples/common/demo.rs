//! What both `--demo`s do around their story: run this program again as child
//! processes (a resume must happen in a fresh process to prove anything), in a folder
//! of their own, with the run's shared flags passed on, and the loss-curve PNG at the
//! end.

use std::error::Error;
use std::path::PathBuf;
use std::process::Command;

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
    if let Some(workers) = flags.workers {
        args.extend(["--workers".into(), workers.to_string()]);
    }
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
    if let Some(batch_size) = flags.batch_size {
        args.extend(["--batch-size".into(), batch_size.to_string()]);
    }
    args
}

/// `base` followed by `extra`.
pub fn with(base: &[String], extra: &[&str]) -> Vec<String> {
    base.iter()
        .cloned()
        .chain(extra.iter().map(|s| s.to_string()))
        .collect()
}
