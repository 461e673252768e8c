//! Checking, before step 1, every path a run will write (and the one it will read at
//! the end), so that a typo or a read-only folder costs a second, not a run: without
//! this, `--out /proc/x/y.csv` trained to the end and then failed, losing the curve,
//! and `--checkpoint` in a missing folder failed only at the save.
//!
//! Each check does what the real write will do, on the real path, and leaves nothing
//! behind: a file that exists is opened for appending (which changes nothing); one that
//! does not is created and removed; checkpoint paths are probed by nn-mini the way a
//! save writes them (a temporary file beside the target). Some paths pass every check
//! and still refuse data (`/proc/version` opens for writing as root): the CSV's header
//! is written before step 1 too (`elastic::open_csv`), which catches those.

use std::fs::{self, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use nn_mini::checkpoint::{check_writable, CheckpointDir};
use nn_mini::CheckpointError;

use super::elastic::checkpoint_dir;
use super::flags::RunFlags;
use super::run::checkpoint_path;

/// A path the run could not use, found before it trained.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A file the run writes (`--out`, `--plot`) cannot be written.
    #[error("cannot write {flag} {path}: {source}")]
    Unwritable {
        /// The flag that named it.
        flag: &'static str,
        /// The path.
        path: PathBuf,
        /// Why, in the operating system's words (or ours: a missing folder).
        #[source]
        source: io::Error,
    },
    /// A file the run reads at the end (`--compare`) cannot be read.
    #[error("cannot read {flag} {path}: {source}")]
    Unreadable {
        /// The flag that named it.
        flag: &'static str,
        /// The path.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: io::Error,
    },
    /// `--checkpoint` or `--checkpoint-dir` cannot be written, or the folder cannot be
    /// read; nn-mini's error names the path and why.
    #[error("{flag}: {source}")]
    Checkpoint {
        /// The flag that named it.
        flag: &'static str,
        /// nn-mini's error.
        #[source]
        source: CheckpointError,
    },
    /// A run that does not resume from the folder was pointed at one that already
    /// holds checkpoints: its saves would mix with them, and pruning would remove the
    /// other run's files (or `--resume-latest` later pick them).
    #[error(
        "--checkpoint-dir {dir} already holds checkpoints of a run (the newest is {newest}); \
         continue that run with --resume-latest, or give an empty or new folder"
    )]
    FolderInUse {
        /// The folder.
        dir: PathBuf,
        /// Its newest checkpoint.
        newest: PathBuf,
    },
}

/// Checks every path the run's flags name before it trains: `--out` and `--plot` can
/// be written, `--compare` can be read, `--checkpoint` (when given, or when
/// `--save-at` will write its default) can be saved to, and `--checkpoint-dir` is made
/// if missing, takes files, can be listed, and holds no checkpoints unless the run
/// resumes from them (`--resume-latest`). Nothing is left behind but the checkpoint
/// folder. In a data parallel run only rank 0 writes, so only rank 0 calls this.
pub fn check(flags: &RunFlags) -> Result<(), OutputError> {
    let files = [("--out", &flags.out), ("--plot", &flags.plot)];
    for (flag, path) in files {
        if let Some(path) = path {
            probe_file(path).map_err(|source| OutputError::Unwritable {
                flag,
                path: path.clone(),
                source,
            })?;
        }
    }
    if let Some(path) = &flags.compare {
        fs::File::open(path).map_err(|source| OutputError::Unreadable {
            flag: "--compare",
            path: path.clone(),
            source,
        })?;
    }
    if flags.checkpoint.is_some() || flags.save_at.is_some() {
        check_writable(checkpoint_path(flags)).map_err(|source| OutputError::Checkpoint {
            flag: "--checkpoint",
            source,
        })?;
    }
    if let Some(dir) = checkpoint_dir(flags) {
        check_folder(&dir, flags.resume_latest)?;
    }
    Ok(())
}

/// Makes and probes the checkpoint folder; refuses one holding checkpoints unless
/// the run resumes from it.
fn check_folder(dir: &CheckpointDir, resumes_from_it: bool) -> Result<(), OutputError> {
    let checkpoint = |source| OutputError::Checkpoint {
        flag: "--checkpoint-dir",
        source,
    };
    dir.create().map_err(checkpoint)?;
    let steps = dir.steps().map_err(checkpoint)?;
    match steps.last() {
        Some(&newest) if !resumes_from_it => Err(OutputError::FolderInUse {
            dir: dir.path().to_path_buf(),
            newest: dir.path_of(newest),
        }),
        _ => Ok(()),
    }
}

/// Whether `path` can be written as a file, changing nothing: an existing file is
/// opened for appending, a missing one created and removed.
fn probe_file(path: &Path) -> io::Result<()> {
    if path.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "this is a folder, not a file",
        ));
    }
    match OpenOptions::new().append(true).open(path) {
        Ok(_) => return Ok(()),
        Err(e)
            if !matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Err(e)
        }
        Err(_) => {}
    }
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !folder.is_dir() {
        let why = match folder.exists() {
            true => "is not a folder",
            false => "does not exist",
        };
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("the folder {} {why}", folder.display()),
        ));
    }
    OpenOptions::new().write(true).create_new(true).open(path)?;
    fs::remove_file(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(out: &Path) -> RunFlags {
        RunFlags {
            out: Some(out.to_path_buf()),
            ..RunFlags::default()
        }
    }

    #[test]
    fn a_bad_out_path_is_named_and_a_good_one_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        fs::write(&file, b"kept").unwrap();
        for (out, why) in [
            (PathBuf::from("/proc/x/y.csv"), "does not exist"),
            (file.join("y.csv"), "is not a folder"),
            (dir.path().to_path_buf(), "is a folder"),
        ] {
            let err = check(&flags(&out)).unwrap_err().to_string();
            assert!(err.contains(&format!("--out {}", out.display())), "{err}");
            assert!(err.contains(why), "{err}");
        }
        check(&flags(&file)).unwrap();
        check(&flags(&dir.path().join("new.csv"))).unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"kept");
        assert!(!dir.path().join("new.csv").exists(), "the probe is removed");
    }

    #[test]
    fn a_fresh_run_refuses_a_folder_of_checkpoints_and_a_resuming_one_takes_it() {
        let dir = tempfile::tempdir().unwrap();
        let ck = dir.path().join("ck");
        let mut flags = RunFlags {
            checkpoint_dir: Some(ck.clone()),
            ..RunFlags::default()
        };
        check(&flags).unwrap();
        assert!(ck.is_dir(), "the folder is made");
        fs::write(ck.join("notes.txt"), b"not a checkpoint").unwrap();
        check(&flags).unwrap();
        fs::write(ck.join(CheckpointDir::file_name(40)), b"x").unwrap();
        let err = check(&flags).unwrap_err().to_string();
        assert!(err.contains("step-00000040.safetensors"), "{err}");
        assert!(err.contains("--resume-latest"), "{err}");
        flags.resume_latest = true;
        check(&flags).unwrap();
    }
}
