//! The parts of a training run's `main` that are not training: the exit status a
//! result maps to, the checks on `--steps` after a resume, and the progress lines and
//! CSV rows of each step.

use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::CommandFactory;

use super::curves::{CsvError, CurveWriter};
use super::flags::{conflict, RunFlags};

/// Print a progress line every this many steps.
pub const LOG_EVERY: u64 = 20;

/// The exit status of a run: its own, 2 (with clap's message) for flags that
/// contradict each other or the checkpoint, 3 for any other error.
pub fn exit_code(result: Result<ExitCode, Box<dyn Error>>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => match e.downcast::<clap::Error>() {
            Ok(e) => e.exit(),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(3)
            }
        },
    }
}

/// The last step of the run (`--steps`, 200 by default), checked to lie after the
/// `done` steps a resumed run starts from, as `--save-at` must. With `--resume-latest`
/// it may also be `done`: a restart of a run that had finished has nothing left to do.
pub fn last_step<C: CommandFactory>(flags: &RunFlags, done: u64) -> Result<u64, clap::Error> {
    let steps = flags.steps.unwrap_or(200);
    let finished = steps == done && flags.resume_latest;
    if (steps <= done && !finished) || flags.save_at.is_some_and(|k| k <= done) {
        return Err(conflict::<C>(format!(
            "the run is already at step {done}: --steps ({steps}) and --save-at must be later"
        )));
    }
    Ok(steps)
}

/// Where `--save-at` writes.
pub fn checkpoint_path(flags: &RunFlags) -> PathBuf {
    flags
        .checkpoint
        .clone()
        .unwrap_or_else(|| "checkpoint.safetensors".into())
}

/// The losses of the steps this process runs, each appended to the run's CSV as it
/// comes (`--out`), and a progress line every [`LOG_EVERY`] steps, at the last step and
/// at `--save-at`.
pub struct Progress {
    steps: u64,
    save_at: Option<u64>,
    started: Instant,
    /// `(step, loss)` of every step run here (not the restored ones).
    pub rows: Vec<(u64, f32)>,
    csv: Option<CurveWriter>,
}

impl Progress {
    /// Progress towards step `steps`, its rows going to `csv` too.
    pub fn new(flags: &RunFlags, steps: u64, csv: Option<CurveWriter>) -> Self {
        Progress {
            steps,
            save_at: flags.save_at,
            started: Instant::now(),
            rows: Vec::new(),
            csv,
        }
    }

    /// Records `step`'s loss (and writes its CSV row); the progress line, if one is due
    /// (`None` otherwise).
    pub fn record(&mut self, step: u64, loss: f32) -> Result<Option<String>, CsvError> {
        self.rows.push((step, loss));
        if let Some(csv) = &mut self.csv {
            csv.append(&[(step, loss)])?;
        }
        let steps = self.steps;
        if !step.is_multiple_of(LOG_EVERY) && step != steps && Some(step) != self.save_at {
            return Ok(None);
        }
        let rate = self.rows.len() as f64 / self.started.elapsed().as_secs_f64();
        Ok(Some(format!(
            "step {step:>5}/{steps} | loss {loss:.6} | {rate:>7.1} steps/s"
        )))
    }
}
