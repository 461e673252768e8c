//! A folder of one run's checkpoints, one file per saved step: what a job restarted
//! with the same command line (torchrun's `--max-restarts`, a preempted cluster job
//! requeued) resumes from.
//!
//! The folder holds `step-NNNNNNNN.safetensors`, the step zero-padded to 8 digits (more
//! past step 99,999,999), each written atomically by [`Checkpoint::save`]: a file with
//! such a name is always a complete save. Only names of exactly that form (the
//! canonical padding, a regular file) are the folder's checkpoints; anything else in it
//! (notes, another program's files, a `step-7.safetensors` typed by hand, a save's
//! temporary file) is never read as one and never removed.
//!
//! - [`CheckpointDir::save`] writes a step's file, then removes the oldest ones beyond
//!   [`keep`](CheckpointDir::keep) (never the file just written) and the temporary files
//!   that killed saves left.
//! - [`CheckpointDir::latest`] finds the newest checkpoint that loads. A newer file that
//!   does not (truncated by a copy, a flipped bit: a complete save can still be damaged
//!   later) is skipped and reported, so a restart falls back to the one before it.
//!
//! This is the folder logic of `ddp_train` and `train_resume`'s `--checkpoint-dir`,
//! `--keep` and `--resume-latest`, public so that any training binary can offer the
//! same restarts.

use std::fs;
use std::io;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use tensor_core::DType;

use super::probe::probe_folder;
use super::run_entries::STEP;
use super::stale::remove_stale_temp_files_of;
use super::{Checkpoint, CheckpointError};

/// How many checkpoints a folder keeps when not told otherwise (`--keep`): the newest
/// one, and two to fall back to if it turns out damaged.
pub const DEFAULT_KEEP: NonZeroUsize = NonZeroUsize::new(3).unwrap();

/// The digits a step is padded to in a checkpoint's file name, so that names sort by
/// step in a directory listing.
const STEP_DIGITS: usize = 8;
const PREFIX: &str = "step-";
const SUFFIX: &str = ".safetensors";

/// A folder of a run's checkpoints (see the module docs). Creating the value touches
/// nothing; [`create`](Self::create) makes and checks the folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointDir {
    dir: PathBuf,
    keep: NonZeroUsize,
}

/// The newest checkpoint of a folder that loads ([`CheckpointDir::latest`]).
#[derive(Debug)]
pub struct Latest {
    /// The step in its file name (and, for a training run's checkpoint, its `train.step`).
    pub step: u64,
    /// Its file.
    pub path: PathBuf,
    /// Its contents, verified.
    pub checkpoint: Checkpoint,
    /// The newer files that did not load, newest first, each with its error: a caller
    /// should warn about each, since a damaged checkpoint means lost progress.
    pub skipped: Vec<Skipped>,
}

/// A checkpoint file [`CheckpointDir::latest`] passed over.
#[derive(Debug)]
pub struct Skipped {
    /// The file.
    pub path: PathBuf,
    /// Why it did not load.
    pub error: CheckpointError,
}

/// What [`CheckpointDir::save`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    /// The checkpoint written.
    pub path: PathBuf,
    /// The older checkpoints removed to keep [`CheckpointDir::keep`], oldest first.
    pub removed: Vec<PathBuf>,
}

impl CheckpointDir {
    /// The checkpoint folder `dir`, keeping the newest `keep` checkpoints.
    pub fn new(dir: impl Into<PathBuf>, keep: NonZeroUsize) -> Self {
        CheckpointDir {
            dir: dir.into(),
            keep,
        }
    }

    /// The folder.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// How many checkpoints a save leaves in the folder.
    #[must_use]
    pub fn keep(&self) -> NonZeroUsize {
        self.keep
    }

    /// The file name of `step`'s checkpoint: `step-00000042.safetensors`.
    #[must_use]
    pub fn file_name(step: u64) -> String {
        format!("{PREFIX}{step:0STEP_DIGITS$}{SUFFIX}")
    }

    /// The step a checkpoint file name stands for; `None` for any name that
    /// [`file_name`](Self::file_name) does not produce (so `step-7.safetensors` and
    /// `step-000000007.safetensors` are not the folder's).
    #[must_use]
    pub fn step_of(name: &str) -> Option<u64> {
        let digits = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let step: u64 = digits.parse().ok()?;
        (Self::file_name(step) == name).then_some(step)
    }

    /// The path of `step`'s checkpoint in the folder.
    #[must_use]
    pub fn path_of(&self, step: u64) -> PathBuf {
        self.dir.join(Self::file_name(step))
    }

    /// Makes the folder (and its parents) if it is missing, and checks that it takes
    /// new files by creating and removing one (named like a save's temporary file, so
    /// nothing is left behind even by a process killed in between). Call it before a
    /// run trains, so that a folder that cannot be written is an error in the first
    /// second, not at the first save: [`CheckpointError::NotWritable`] naming it.
    pub fn create(&self) -> Result<(), CheckpointError> {
        let not_writable = |source| CheckpointError::NotWritable {
            path: self.dir.clone(),
            source,
        };
        if self.dir.exists() && !self.dir.is_dir() {
            return Err(not_writable(io::Error::new(
                io::ErrorKind::NotADirectory,
                "this is a file, not a folder",
            )));
        }
        if !self.dir.is_dir() {
            fs::create_dir_all(&self.dir).map_err(|e| {
                let why = match e.kind() {
                    io::ErrorKind::NotADirectory => "the path runs through a file".into(),
                    _ => e.to_string(),
                };
                not_writable(io::Error::new(
                    e.kind(),
                    format!("cannot create the folder: {why}"),
                ))
            })?;
        }
        probe_folder(&self.dir, &Self::file_name(0)).map_err(not_writable)
    }

    /// The steps of the folder's checkpoints, oldest first. A folder that does not
    /// exist holds none (a run's first start, before [`create`](Self::create)); one
    /// that cannot be read is [`CheckpointError::Io`] naming it.
    pub fn steps(&self) -> Result<Vec<u64>, CheckpointError> {
        let unreadable = |source| CheckpointError::Io {
            path: self.dir.clone(),
            source,
        };
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(unreadable(e)),
        };
        let mut steps = Vec::new();
        for entry in entries {
            let entry = entry.map_err(unreadable)?;
            let step = entry.file_name().to_str().and_then(Self::step_of);
            if let Some(step) = step {
                // Not following links: a save writes regular files only.
                if entry.file_type().map_err(unreadable)?.is_file() {
                    steps.push(step);
                }
            }
        }
        steps.sort_unstable();
        Ok(steps)
    }

    /// The newest checkpoint in the folder that loads and verifies (its checksum, and a
    /// training run's `train.step` against its name), with the newer ones that did not
    /// ([`Latest::skipped`]). `None` when the folder holds no checkpoint (or does not
    /// exist): a run's first start. When it holds some but none loads, the error is
    /// [`CheckpointError::NoLoadableCheckpoint`] listing each and why: starting over
    /// there would hide a run's progress rather than continue it.
    pub fn latest(&self) -> Result<Option<Latest>, CheckpointError> {
        let mut skipped = Vec::new();
        for step in self.steps()?.into_iter().rev() {
            let path = self.path_of(step);
            let loaded = Checkpoint::load(&path).and_then(|ck| check_step(ck, step));
            match loaded {
                Ok(checkpoint) => {
                    return Ok(Some(Latest {
                        step,
                        path,
                        checkpoint,
                        skipped,
                    }))
                }
                Err(error) => skipped.push(Skipped { path, error }),
            }
        }
        if skipped.is_empty() {
            return Ok(None);
        }
        Err(CheckpointError::NoLoadableCheckpoint {
            dir: self.dir.clone(),
            skipped: skipped
                .into_iter()
                .map(|s| (s.path, s.error.to_string()))
                .collect(),
        })
    }

    /// Writes `ck` as `step`'s checkpoint (atomically, replacing an older save of the
    /// same step), then removes the oldest checkpoints beyond [`keep`](Self::keep),
    /// never the one just written, and the temporary files of killed saves of any step.
    /// A checkpoint that cannot be removed is an error naming it (the save itself is
    /// done by then).
    pub fn save(&self, ck: &Checkpoint, step: u64) -> Result<Saved, CheckpointError> {
        let path = self.path_of(step);
        ck.save(&path)?;
        remove_stale_temp_files_of(&self.dir, |target| Self::step_of(target).is_some());
        let mut others = self.steps()?;
        others.retain(|&s| s != step);
        let beyond = (others.len() + 1).saturating_sub(self.keep.get());
        let mut removed = Vec::new();
        for old in others.into_iter().take(beyond) {
            let old = self.path_of(old);
            match fs::remove_file(&old) {
                Ok(()) => removed.push(old),
                // Gone already: what pruning wanted.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => return Err(CheckpointError::Io { path: old, source }),
            }
        }
        Ok(Saved { path, removed })
    }
}

/// `ck`, unless it holds a training run's step (`train.step`) other than `step`, the one
/// its file name says: a file copied or renamed by hand would otherwise make "the
/// newest" mean another step than the one resumed.
fn check_step(ck: Checkpoint, step: u64) -> Result<Checkpoint, CheckpointError> {
    if ck.names().any(|n| n == STEP) {
        let saved = ck.tensor_like(STEP, &[], DType::I64)?.to_vec::<i64>()?[0];
        if u64::try_from(saved) != Ok(step) {
            return Err(CheckpointError::Inconsistent {
                name: STEP.into(),
                reason: format!(
                    "the file is named for step {step} but holds step {saved} (copied or renamed by hand?)"
                ),
            });
        }
    }
    Ok(ck)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_round_trip_and_only_canonical_ones_are_checkpoints() {
        assert_eq!(CheckpointDir::file_name(42), "step-00000042.safetensors");
        assert_eq!(
            CheckpointDir::file_name(123_456_789),
            "step-123456789.safetensors"
        );
        for step in [0, 42, 99_999_999, 100_000_000, u64::MAX] {
            let name = CheckpointDir::file_name(step);
            assert_eq!(CheckpointDir::step_of(&name), Some(step), "{name}");
        }
        for other in [
            "step-7.safetensors",
            "step-000000007.safetensors",
            "step-0000004x.safetensors",
            "step-+0000042.safetensors",
            "step-00000042.safetensors.bak",
            "step-00000042.pt",
            ".step-00000042.safetensors.tmp-12-0",
            "Step-00000042.safetensors",
            "step-.safetensors",
            "step-99999999999999999999.safetensors",
        ] {
            assert_eq!(CheckpointDir::step_of(other), None, "{other}");
        }
    }
}
