//! Finding out, before a run trains, whether its checkpoints can be saved where it was
//! told to save them.
//!
//! A run that learns at its first save, an hour in, that its checkpoint folder is
//! missing or read-only has lost that hour. So a training binary checks its save paths
//! before step 1, the way a save will use them: a save writes a temporary file beside
//! the target and renames it over the target (`atomic.rs`), so the check creates and
//! removes such a temporary file in the same folder. That exercises what a save needs
//! (the folder exists, is a folder, takes new files) and leaves nothing behind: the
//! probe is named like a save's temporary file, so even a process killed between the
//! create and the remove leaves a file that the next save removes (`stale.rs`).

use std::fs::{self, OpenOptions};
use std::io;
use std::path::Path;

use super::atomic::{folder_of, temp_path};
use super::CheckpointError;

/// Checks that a checkpoint can be saved at `path` ([`Checkpoint::save`]): its folder
/// exists and takes new files, and `path` is not a folder. Creates and removes one
/// temporary file there; changes nothing else (an existing checkpoint at `path` is not
/// touched). A failure is [`CheckpointError::NotWritable`] naming `path` and why.
///
/// [`Checkpoint::save`]: super::Checkpoint::save
pub fn check_writable(path: impl AsRef<Path>) -> Result<(), CheckpointError> {
    let path = path.as_ref();
    let not_writable = |source| CheckpointError::NotWritable {
        path: path.to_path_buf(),
        source,
    };
    let Some(name) = path.file_name() else {
        return Err(not_writable(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a file path (a checkpoint is a file)",
        )));
    };
    if path.is_dir() {
        return Err(not_writable(io::Error::new(
            io::ErrorKind::IsADirectory,
            "this is a folder; a checkpoint is a file (use --checkpoint-dir for a folder of them)",
        )));
    }
    let dir = folder_of(path);
    probe_folder(&dir, &name.to_string_lossy()).map_err(not_writable)
}

/// Creates and removes a temporary file of a save of `name` in `dir`. The error says
/// which part failed in words a user can act on: a folder that does not exist, a path
/// that runs through a file, or the operating system's own reason (read-only, no
/// permission, no space).
pub(crate) fn probe_folder(dir: &Path, name: &str) -> io::Result<()> {
    match fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(io::Error::new(
                e.kind(),
                format!("the folder {} does not exist", dir.display()),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => return Err(under_a_file(dir)),
        Ok(meta) if !meta.is_dir() => return Err(under_a_file(dir)),
        _ => {}
    }
    let probe = temp_path(dir, name);
    let created = OpenOptions::new().write(true).create_new(true).open(&probe);
    match created {
        Ok(file) => {
            drop(file);
            fs::remove_file(&probe).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("could not remove the probe file {}: {e}", probe.display()),
                )
            })
        }
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("cannot create files in {}: {e}", dir.display()),
        )),
    }
}

/// The error for a folder path that names a file, or runs through one.
fn under_a_file(dir: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotADirectory,
        format!(
            "{} is not a folder (the path runs through a file)",
            dir.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn each_unwritable_path_is_named_with_its_reason_and_nothing_is_left_behind() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        fs::write(&file, b"x").unwrap();
        for (path, why) in [
            (dir.path().join("missing/ck.safetensors"), "does not exist"),
            (file.join("ck.safetensors"), "not a folder"),
            (dir.path().to_path_buf(), "this is a folder"),
            (PathBuf::from("/"), "not a file path"),
        ] {
            let err = check_writable(&path).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, CheckpointError::NotWritable { .. }), "{text}");
            assert!(text.contains(&path.display().to_string()), "{text}");
            assert!(text.contains(why), "{path:?}: {text}");
        }
        let ok = dir.path().join("ck.safetensors");
        check_writable(&ok).unwrap();
        let mut names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["a-file"], "the probe removed its file");
    }
}
