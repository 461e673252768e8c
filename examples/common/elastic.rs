//! Elastic restarts of a training run: `--checkpoint-dir DIR`, `--save-every N`,
//! `--keep K` and `--resume-latest`, the part of them that is the same for every
//! training binary (the folder itself is `nn_mini::checkpoint::CheckpointDir`).
//!
//! A job launched by torchrun with `--max-restarts`, or requeued on a preemptible
//! cluster, is started again with the very same command line. With these flags that
//! line works for the first start and for every restart:
//!
//! ```text
//! train_resume --seed 7 --steps 200 --checkpoint-dir ck --save-every 20 \
//!     --resume-latest --out run.csv
//! ```
//!
//! starts fresh while `ck/` holds no checkpoint, saves `ck/step-00000020.safetensors`,
//! `..40..` and so on (the newest 3 kept), and after a kill continues from the newest
//! one that loads. Its CSV is the run's, not the process's: each start rewrites the rows
//! up to the resumed step from the loss history in the checkpoint and appends the rest,
//! so after the last restart `run.csv` has the uninterrupted run's bytes.

use std::num::NonZeroUsize;

use nn_mini::checkpoint::{CheckpointDir, Saved, Skipped, DEFAULT_KEEP};

use super::curves::{CsvError, CurveWriter};
use super::flags::RunFlags;

/// The run's checkpoint folder (`--checkpoint-dir`, `--keep`), if it has one. Touches
/// nothing on disk: `outputs::check` makes and checks the folder (on rank 0).
pub fn checkpoint_dir(flags: &RunFlags) -> Option<CheckpointDir> {
    // clap keeps --keep within 1..; the default is nn-mini's.
    let keep = flags
        .keep
        .and_then(NonZeroUsize::new)
        .unwrap_or(DEFAULT_KEEP);
    let dir = flags.checkpoint_dir.as_ref()?;
    Some(CheckpointDir::new(dir, keep))
}

/// Whether the run saves into its checkpoint folder after `step`: every
/// `--save-every` steps, and at the last step, so that a restart of a finished run
/// finds it finished.
pub fn save_due(flags: &RunFlags, step: u64, last: u64) -> bool {
    flags.checkpoint_dir.is_some()
        && (step == last || flags.save_every.is_some_and(|n| step.is_multiple_of(n)))
}

/// Warns, on stderr, about each newer checkpoint a resume passed over: it means lost
/// progress, and a file someone may want to look at.
pub fn warn_skipped(skipped: &[Skipped]) {
    for s in skipped {
        eprintln!(
            "warning: skipping the checkpoint {} (it does not load: {}); resuming an older one",
            s.path.display(),
            s.error
        );
    }
}

/// The line a save prints: what was written and what was pruned.
pub fn saved_line(saved: &Saved, step: u64) -> String {
    let mut line = format!("saved {} after step {step}", saved.path.display());
    if !saved.removed.is_empty() {
        let names: Vec<String> = saved
            .removed
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        line += &format!(" (removed {})", names.join(", "));
    }
    line
}

/// The rows of `history` (the losses of steps 1, 2, ...).
pub fn rows_of(history: &[f32]) -> Vec<(u64, f32)> {
    (1..).zip(history.iter().copied()).collect()
}

/// Opens the run's CSV (`--out`) before step 1. It starts empty, except with
/// `--resume-latest`, where it starts with the whole `history` restored from the
/// checkpoint (steps 1..=resumed), so that the file is the run's curve whichever
/// restart finishes it. A path that cannot be written fails here, before any training.
/// `val_column` adds the `val_loss` column of a run that evaluates.
pub fn open_csv(
    flags: &RunFlags,
    history: &[f32],
    val_column: bool,
) -> Result<Option<CurveWriter>, CsvError> {
    let Some(out) = &flags.out else {
        return Ok(None);
    };
    let earlier = match flags.resume_latest {
        true => rows_of(history),
        false => Vec::new(),
    };
    CurveWriter::create(out, &earlier, val_column).map(Some)
}

/// The rows the run's report compares and plots as "this run": the steps this process
/// ran, or with `--resume-latest` the whole run (as its CSV holds).
pub fn report_rows(flags: &RunFlags, ran: &[(u64, f32)], history: &[f32]) -> Vec<(u64, f32)> {
    match flags.resume_latest {
        true => rows_of(history),
        false => ran.to_vec(),
    }
}
