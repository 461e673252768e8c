//! Command-line flags of `train_resume`, parsed by hand (no clap) with typed errors.

use std::fmt;
use std::path::PathBuf;

use tensor_core::{DeterministicMode, Device};

/// The usage message, printed by `--help` and after every flag error.
pub const USAGE: &str = "\
usage: train_resume [options]

  --seed N            run seed (default 0); on --resume it must match the checkpoint
  --steps N           train until step N (default 200)
  --batch-size N      samples per batch (default 128); on --resume it must match
  --workers N         data-loader worker threads (default 0); never changes the results
  --device D          cpu or cuda:N (default cpu)
  --save-at STEP      write the checkpoint after STEP and exit, like a job hitting its
                      time limit
  --checkpoint PATH   where --save-at writes (default checkpoint.safetensors)
  --resume PATH       continue the run saved in PATH
  --out PATH          write this run's losses as CSV: step,loss (one row per step run)
  --compare PATH      compare this run's losses with the same steps of another CSV;
                      prints both curves and `identical: yes` or `identical: no` (exit 1)
  --plot PATH         draw the loss curve(s) as a PNG
  --deterministic M   off, warn or error: use_deterministic_algorithms' mode (default
                      off); every op the demo runs is deterministic, so the curves are
                      the same in every mode
  --demo              the whole story: a straight run, a run killed at --save-at
                      (default 3/5 of --steps), a resume compared with the straight run
  --help              this message

exit status: 0 ok, 1 the compared curves differ, 2 bad flags, 3 any other error";

/// The flags that take a value.
const VALUE_FLAGS: &[&str] = &[
    "--seed",
    "--steps",
    "--batch-size",
    "--workers",
    "--device",
    "--save-at",
    "--checkpoint",
    "--resume",
    "--out",
    "--compare",
    "--plot",
    "--deterministic",
];

/// Parsed flags. `None` means "not given", so a resume can tell a default from a
/// value the user typed.
#[derive(Clone, Debug, Default)]
pub struct Args {
    pub seed: Option<u64>,
    pub steps: Option<u64>,
    pub batch_size: Option<usize>,
    pub workers: Option<usize>,
    pub device: Option<Device>,
    pub save_at: Option<u64>,
    pub checkpoint: Option<PathBuf>,
    pub resume: Option<PathBuf>,
    pub out: Option<PathBuf>,
    pub compare: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub deterministic: Option<DeterministicMode>,
    pub demo: bool,
    pub help: bool,
}

/// What was wrong with the command line.
#[derive(Debug, PartialEq, Eq)]
pub enum ArgError {
    /// A flag this program does not know.
    UnknownFlag(String),
    /// A flag that needs a value was last.
    MissingValue(String),
    /// A value that does not parse or is out of range.
    InvalidValue {
        flag: String,
        value: String,
        expected: &'static str,
    },
    /// A flag given twice.
    Repeated(String),
    /// Flags that contradict each other.
    Conflict(String),
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::UnknownFlag(flag) => write!(f, "unknown flag {flag:?}"),
            ArgError::MissingValue(flag) => write!(f, "{flag} needs a value"),
            ArgError::InvalidValue {
                flag,
                value,
                expected,
            } => {
                write!(f, "{flag} {value:?}: expected {expected}")
            }
            ArgError::Repeated(flag) => write!(f, "{flag} is given more than once"),
            ArgError::Conflict(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for ArgError {}

/// Parses `--flag value` and `--flag=value` forms.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, ArgError> {
    let mut parsed = Args::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        match flag.as_str() {
            "--demo" | "--help" | "-h" => {
                if inline.is_some() {
                    return Err(ArgError::InvalidValue {
                        flag,
                        value: inline.unwrap_or_default(),
                        expected: "no value",
                    });
                }
                if flag == "--demo" {
                    parsed.demo = true;
                } else {
                    parsed.help = true;
                }
                continue;
            }
            _ => {}
        }
        if !VALUE_FLAGS.contains(&flag.as_str()) {
            return Err(ArgError::UnknownFlag(flag));
        }
        let value = match inline {
            Some(v) => v,
            None => args
                .next()
                .ok_or_else(|| ArgError::MissingValue(flag.clone()))?,
        };
        let number = |expected| {
            value.parse::<u64>().map_err(|_| ArgError::InvalidValue {
                flag: flag.clone(),
                value: value.clone(),
                expected,
            })
        };
        let positive = |expected| match number(expected)? {
            0 => Err(ArgError::InvalidValue {
                flag: flag.clone(),
                value: value.clone(),
                expected,
            }),
            n => Ok(n),
        };
        let to_usize = |n: u64, expected| {
            usize::try_from(n).map_err(|_| ArgError::InvalidValue {
                flag: flag.clone(),
                value: value.clone(),
                expected,
            })
        };
        let path = || Some(PathBuf::from(&value));
        let slot_taken = match flag.as_str() {
            "--seed" => set(
                &mut parsed.seed,
                Some(number("an unsigned 64-bit integer")?),
            ),
            "--steps" => set(&mut parsed.steps, Some(positive("a positive integer")?)),
            "--batch-size" => {
                let n = to_usize(positive("a positive integer")?, "a positive integer")?;
                set(&mut parsed.batch_size, Some(n))
            }
            "--workers" => {
                let n = to_usize(number("a non-negative integer")?, "a non-negative integer")?;
                if n > 256 {
                    return Err(ArgError::InvalidValue {
                        flag,
                        value,
                        expected: "at most 256 workers",
                    });
                }
                set(&mut parsed.workers, Some(n))
            }
            "--device" => {
                let device = value
                    .parse::<Device>()
                    .map_err(|_| ArgError::InvalidValue {
                        flag: flag.clone(),
                        value: value.clone(),
                        expected: "cpu or cuda:N",
                    })?;
                set(&mut parsed.device, Some(device))
            }
            "--save-at" => set(
                &mut parsed.save_at,
                Some(positive("a positive step number")?),
            ),
            "--checkpoint" => set(&mut parsed.checkpoint, path()),
            "--resume" => set(&mut parsed.resume, path()),
            "--out" => set(&mut parsed.out, path()),
            "--compare" => set(&mut parsed.compare, path()),
            "--plot" => set(&mut parsed.plot, path()),
            "--deterministic" => {
                let mode = match value.as_str() {
                    "off" => DeterministicMode::Off,
                    "warn" => DeterministicMode::Warn,
                    "error" => DeterministicMode::Error,
                    _ => {
                        return Err(ArgError::InvalidValue {
                            flag,
                            value,
                            expected: "off, warn or error",
                        })
                    }
                };
                set(&mut parsed.deterministic, Some(mode))
            }
            _ => return Err(ArgError::UnknownFlag(flag)),
        };
        if slot_taken {
            return Err(ArgError::Repeated(flag));
        }
    }
    if let (Some(save_at), Some(steps)) = (parsed.save_at, parsed.steps) {
        if save_at > steps {
            return Err(ArgError::Conflict(format!(
                "--save-at {save_at} is after the last step (--steps {steps})"
            )));
        }
    }
    if parsed.demo && (parsed.resume.is_some() || parsed.compare.is_some() || parsed.out.is_some())
    {
        return Err(ArgError::Conflict(
            "--demo runs the three steps itself; it takes no --resume, --compare or --out".into(),
        ));
    }
    Ok(parsed)
}

/// Stores `value` in `slot`; true when the slot was already set (a repeated flag).
fn set<T>(slot: &mut Option<T>, value: Option<T>) -> bool {
    let taken = slot.is_some();
    *slot = value;
    taken
}

/// Errors when a flag given with `--resume` repeats a setting with a value other than
/// the checkpoint's: a resume continues the saved run, it cannot change it.
pub fn check_same<T: PartialEq + std::fmt::Display>(
    flag: &str,
    given: Option<T>,
    saved: T,
) -> Result<(), ArgError> {
    match given {
        Some(value) if value != saved => Err(ArgError::Conflict(format!(
            "{flag} {value} does not match the checkpoint's {saved}; a resume continues the saved run"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(line: &str) -> Result<Args, ArgError> {
        parse(line.split_whitespace().map(String::from))
    }

    #[test]
    fn accepts_both_spellings_and_rejects_bad_input() {
        let a =
            parse_str("--seed 7 --steps=200 --workers 3 --device cuda:1 --save-at 120").unwrap();
        assert_eq!(
            (a.seed, a.steps, a.workers, a.save_at),
            (Some(7), Some(200), Some(3), Some(120))
        );
        assert_eq!(a.device, Some(Device::Cuda(1)));
        assert!(parse_str("--demo --help").is_ok_and(|a| a.demo && a.help));
        for (line, want) in [
            ("--frobnicate", "unknown"),
            ("positional", "unknown"),
            ("--seed", "needs a value"),
            ("--steps 0", "expected"),
            ("--steps -3", "expected"),
            ("--device gpu", "cpu or cuda"),
            ("--seed 1 --seed 2", "more than once"),
            ("--steps 10 --save-at 11", "after the last step"),
            ("--demo --resume x", "takes no"),
            ("--demo=1", "no value"),
        ] {
            let err = parse_str(line).unwrap_err().to_string();
            assert!(err.contains(want), "{line}: {err}");
        }
    }
}
