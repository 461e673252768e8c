//! Atomic replacement of a file: a crash mid-save leaves the previous checkpoint intact.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::stale::{remove_stale_temp_files, temp_name};
use super::CheckpointError;

/// Writes `bytes` to `path` so that, at every instant, `path` is either the old file or
/// the complete new one: write a temporary file in the same directory, fsync it, rename
/// it over `path` (atomic within one file system), then fsync the directory so the
/// rename itself survives a power cut. On failure the temporary file is removed; a
/// process killed mid-save cannot remove it, so each save first removes the temporary
/// files of `path` that dead writers left (see `stale.rs`). The writer holds an
/// exclusive lock on its temporary file until the rename, which is how a cleaner
/// elsewhere knows it is still in use.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    write_atomically_with(path, bytes, || Ok(()))
}

/// [`write_atomically`] with a hook run after the temporary file is written and synced
/// but before the rename: tests use it to simulate a crash at the worst moment.
pub(crate) fn write_atomically_with(
    path: &Path,
    bytes: &[u8],
    before_rename: impl FnOnce() -> io::Result<()>,
) -> Result<(), CheckpointError> {
    let io_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CheckpointError::Io { path, source }
    };
    let dir = folder_of(path);
    let name = path.file_name().ok_or_else(|| CheckpointError::Io {
        path: path.to_path_buf(),
        source: io::Error::new(io::ErrorKind::InvalidInput, "not a file path"),
    })?;
    let name = name.to_string_lossy();
    remove_stale_temp_files(&dir, &name);
    let tmp = temp_path(&dir, &name);
    let written = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        file.lock()?;
        file.write_all(bytes)?;
        file.sync_all()?;
        before_rename()?;
        Ok(file)
    })();
    // The open file (and its lock) lives until after the rename.
    let _locked = match written {
        Ok(file) => file,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(io_error(&tmp)(e));
        }
    };
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(io_error(path)(e));
    }
    sync_dir(&dir).map_err(io_error(&dir))
}

/// The folder a file path's file lives in (`.` for a bare file name): where a save of
/// it writes its temporary file, and so the folder `probe.rs` checks before a run.
pub(crate) fn folder_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A temporary file path of this process for a save of `name` (a file name) in `dir`,
/// unique among this process's saves and probes.
pub(crate) fn temp_path(dir: &Path, name: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    dir.join(temp_name(
        name,
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
    ))
}

/// Makes a rename in `dir` durable.
#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// Directories cannot be opened for syncing here; the rename is still atomic.
#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_before_the_rename_leaves_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ck.safetensors");
        write_atomically(&path, b"old and complete").unwrap();
        let crash = || {
            Err(io::Error::other(
                "simulated crash after writing the new file",
            ))
        };
        let err = write_atomically_with(&path, b"new", crash).unwrap_err();
        assert!(matches!(err, CheckpointError::Io { .. }));
        assert_eq!(fs::read(&path).unwrap(), b"old and complete");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["ck.safetensors"], "the temporary file is removed");
        write_atomically(&path, b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        // A bare file name writes in the current directory's terms.
        assert!(write_atomically(Path::new(""), b"x").is_err());
    }
}
