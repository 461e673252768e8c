//! The flags `train_resume` and `ddp_train` share, as one clap struct each program
//! flattens into its own, so the two command lines cannot drift apart.
//!
//! Every numeric flag has a range, stated in `--help` and enforced by clap before
//! anything runs: a value outside it is an error naming the flag and the range (exit
//! status 2), never a run with a silently clamped or absurd setting.

use std::path::PathBuf;

use clap::builder::RangedU64ValueParser;
use clap::error::ErrorKind;
use clap::{Args, CommandFactory, ValueEnum};
use nn_mini::train::TrainConfig;
use tensor_core::{DeterministicMode, Device};

/// The last step of a run when `--steps` is not given.
pub const DEFAULT_STEPS: u64 = 200;
/// The most steps a run may train: a million steps take hours on a CPU, and the loss
/// history every checkpoint carries stays at 4 MB.
pub const MAX_STEPS: u64 = 1_000_000;
/// The largest batch: the synthetic dataset's size (`TrainConfig::default()
/// .dataset_size`, checked by a test). The loader does not drop a last partial batch,
/// so a larger batch would silently be the whole dataset.
pub const MAX_BATCH_SIZE: u64 = 4000;
/// The most data-loader worker threads.
pub const MAX_WORKERS: u64 = 256;

/// `--deterministic`: the modes of `tensor_core::use_deterministic_algorithms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModeFlag {
    /// Fast paths where they pay (the default).
    Off,
    /// Deterministic paths; an explicit fast one warns once per op.
    Warn,
    /// Deterministic paths; an explicit fast one is an error.
    Error,
}

impl From<ModeFlag> for DeterministicMode {
    fn from(mode: ModeFlag) -> Self {
        match mode {
            ModeFlag::Off => DeterministicMode::Off,
            ModeFlag::Warn => DeterministicMode::Warn,
            ModeFlag::Error => DeterministicMode::Error,
        }
    }
}

/// A training run's flags. `None` means "not given", so a resume can tell a default
/// from a value the user typed (the defaults are stated in each flag's help).
#[derive(Args, Clone, Debug, Default, PartialEq)]
pub struct RunFlags {
    /// Run seed, any unsigned 64-bit integer [default: 0]; on --resume it must match
    /// the checkpoint's
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,

    /// Train until step N, 1..=1000000 [default: 200]
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<u64>::new().range(1..=MAX_STEPS))]
    pub steps: Option<u64>,

    /// Samples per batch, 1..=4000 (the dataset's size) [default: 128]; on --resume it
    /// must match the checkpoint's
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_BATCH_SIZE))]
    pub batch_size: Option<usize>,

    /// Data-loader worker threads, 0..=256 [default: 0]; never changes a number
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(0..=MAX_WORKERS))]
    pub workers: Option<usize>,

    /// Write the checkpoint after STEP and exit, like a job hitting its time limit;
    /// 1..=--steps
    #[arg(long, value_name = "STEP", value_parser = RangedU64ValueParser::<u64>::new().range(1..=MAX_STEPS))]
    pub save_at: Option<u64>,

    /// Where --save-at writes [default: checkpoint.safetensors]
    #[arg(long, value_name = "PATH")]
    pub checkpoint: Option<PathBuf>,

    /// Continue the run saved in PATH (its settings come from the checkpoint)
    #[arg(long, value_name = "PATH")]
    pub resume: Option<PathBuf>,

    /// Save periodic checkpoints in DIR as step-NNNNNNNN.safetensors (every
    /// --save-every steps and at the last step; each written atomically). Made if
    /// missing; a fresh run refuses a DIR that already holds checkpoints (continue that
    /// run with --resume-latest, or pick an empty folder)
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,

    /// With --checkpoint-dir: save a checkpoint every N steps, 1..=1000000 [default:
    /// only at the last step]
    #[arg(long, value_name = "N", requires = "checkpoint_dir", value_parser = RangedU64ValueParser::<u64>::new().range(1..=MAX_STEPS))]
    pub save_every: Option<u64>,

    /// With --checkpoint-dir: keep the newest K checkpoints, 1..=1000000 [default: 3];
    /// after each save the older ones are removed (never the one just written, never a
    /// file not named like the folder's checkpoints)
    #[arg(long, value_name = "K", requires = "checkpoint_dir", value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_STEPS))]
    pub keep: Option<usize>,

    /// With --checkpoint-dir: continue from the newest checkpoint in DIR that loads (a
    /// damaged newer one is skipped with a warning), or start fresh when DIR holds none,
    /// so the same command line serves a job's first start and every restart. --out
    /// then holds the whole run's curve, its earlier steps rewritten from the
    /// checkpoint's loss history
    #[arg(long, requires = "checkpoint_dir", conflicts_with = "resume")]
    pub resume_latest: bool,

    /// Write this run's losses as CSV: step,loss (one row per step run, written as the
    /// run goes; with --resume-latest, every step of the run)
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,

    /// Compare this run's losses with the same steps of another CSV; prints both
    /// curves and `identical: yes` or `identical: no` (exit status 1)
    #[arg(long, value_name = "PATH")]
    pub compare: Option<PathBuf>,

    /// Draw the loss curve(s) as a PNG (--demo draws one by default, next to its CSVs)
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,

    /// With --demo: do not draw the loss-curve PNG
    #[arg(long, conflicts_with = "plot")]
    pub no_plot: bool,

    /// use_deterministic_algorithms' mode [default: off]; every op the runs use is
    /// deterministic, so the curves are the same in every mode
    #[arg(long, value_name = "MODE")]
    pub deterministic: Option<ModeFlag>,

    /// Portable arithmetic (tensor_core::use_portable_arithmetic, docs/contract.md §14):
    /// ditto's own matmul, exp and log, so the curve is the same bytes on the CPU (any
    /// SIMD level and thread count) and on CUDA. Slower than gemm / cuBLAS. A checkpoint
    /// records it, and a resume under the other setting is refused
    #[arg(long)]
    pub portable: bool,
}

impl RunFlags {
    /// The step the run trains to: `--steps`, or [`DEFAULT_STEPS`].
    pub fn last_step(&self) -> u64 {
        self.steps.unwrap_or(DEFAULT_STEPS)
    }

    /// Sets the process-wide switches the flags ask for (`--deterministic`,
    /// `--portable`); called once at the start of `main`.
    pub fn apply_switches(&self) {
        if let Some(mode) = self.deterministic {
            tensor_core::use_deterministic_algorithms(mode.into());
        }
        tensor_core::use_portable_arithmetic(self.portable);
    }

    /// The configuration of a fresh run on `device`: the demo's MLP and data
    /// (`TrainConfig::default()`) with the seed, batch size and worker count given.
    #[allow(dead_code)] // train_gpt builds a GptTrainConfig of its own
    pub fn train_config(&self, device: Device) -> TrainConfig {
        TrainConfig {
            seed: self.seed.unwrap_or(0),
            batch_size: self.batch_size.unwrap_or(128),
            num_workers: self.workers.unwrap_or(0),
            device,
            ..TrainConfig::default()
        }
    }

    /// The checks clap's attributes cannot state: `--save-at` within `--steps`.
    pub fn validate<C: CommandFactory>(&self) -> Result<(), clap::Error> {
        if let (Some(save_at), Some(steps)) = (self.save_at, self.steps) {
            if save_at > steps {
                return Err(conflict::<C>(format!(
                    "--save-at {save_at} is after the last step (--steps {steps})"
                )));
            }
        }
        Ok(())
    }
}

/// A command-line error of program `C` found after parsing (flags that contradict
/// each other or a checkpoint); printed like clap's own, with exit status 2.
pub fn conflict<C: CommandFactory>(message: String) -> clap::Error {
    C::command().error(ErrorKind::ArgumentConflict, message)
}

/// Errors when a flag given with `--resume` repeats a setting with a value other than
/// the checkpoint's: a resume continues the saved run, it cannot change it.
pub fn check_same<C: CommandFactory, T: PartialEq + std::fmt::Display>(
    flag: &str,
    given: Option<T>,
    saved: T,
) -> Result<(), clap::Error> {
    match given {
        Some(value) if value != saved => Err(conflict::<C>(format!(
            "{flag} {value} does not match the checkpoint's {saved}; a resume continues the saved run"
        ))),
        _ => Ok(()),
    }
}

/// For the programs' flag tests: `line` parsed as program `A`'s command line.
#[cfg(test)]
pub fn parse_line<A: clap::Parser>(name: &str, line: &str) -> Result<A, clap::Error> {
    A::try_parse_from(std::iter::once(name).chain(line.split_whitespace()))
}

/// For the programs' flag tests: asserts that `A`'s command is well formed and that its
/// `--help` states each of `texts` (a range, a default), so no limit goes unsaid.
/// Returns the help.
#[cfg(test)]
pub fn assert_help_states<A: CommandFactory>(texts: &[&str]) -> String {
    A::command().debug_assert();
    let help = A::command().render_long_help().to_string();
    for text in texts {
        assert!(help.contains(text), "--help does not state {text}:\n{help}");
    }
    help
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// A program with just the shared flags.
    #[derive(Parser, Debug)]
    struct Run {
        #[command(flatten)]
        run: RunFlags,
    }

    fn parse(line: &str) -> Result<RunFlags, clap::Error> {
        let run: Run = parse_line("run", line)?;
        run.run.validate::<Run>()?;
        Ok(run.run)
    }

    #[test]
    fn the_elastic_flags_parse_and_their_bad_combinations_are_refused() {
        let f = parse("--checkpoint-dir ck --save-every 20 --keep 5 --resume-latest").unwrap();
        assert_eq!(f.checkpoint_dir, Some(PathBuf::from("ck")));
        assert_eq!(
            (f.save_every, f.keep, f.resume_latest),
            (Some(20), Some(5), true)
        );
        assert_help_states::<Run>(&[
            "--save-every <N>",
            "1..=1000000",
            "[default: 3]",
            "--resume-latest",
        ]);
        for (line, want) in [
            ("--checkpoint-dir ck --keep 0", "0 is not in 1..=1000000"),
            (
                "--checkpoint-dir ck --save-every 0",
                "0 is not in 1..=1000000",
            ),
            ("--checkpoint-dir ck --save-every x", "invalid digit"),
            ("--resume-latest", "--checkpoint-dir <DIR>"),
            ("--save-every 5", "--checkpoint-dir <DIR>"),
            ("--keep 2", "--checkpoint-dir <DIR>"),
            (
                "--checkpoint-dir ck --resume-latest --resume ck/step-00000020.safetensors",
                "cannot be used with",
            ),
            ("--checkpoint-dir", "a value is required"),
        ] {
            let err = parse(line).unwrap_err().to_string();
            assert!(err.contains(want), "{line}: {err}");
        }
    }

    #[test]
    fn the_batch_bound_is_the_dataset_size() {
        let dataset = TrainConfig::default().dataset_size;
        assert_eq!(MAX_BATCH_SIZE, dataset as u64);
    }
}
