//! Temporary files of checkpoint saves: their names, and removing the ones a killed
//! process left behind.
//!
//! A save writes `.{file name}.tmp-{pid}-{n}` beside the target and renames it over the
//! target when complete (see `atomic.rs`). A process killed between the two leaves that
//! file behind, complete or not, and nothing else would ever remove it: 60 SIGKILLs
//! once left 14 files of about 682 KB each. So every save first removes the temporary
//! files *of its own target* whose writer is gone:
//!
//! - the name must parse as `.{target}.tmp-{pid}-{n}` (two decimal numbers);
//! - the pid must not be this process (another thread may be saving right now);
//! - the pid must not be alive (`kill(pid, 0)` fails with `ESRCH`): a live writer's
//!   file is never touched, whatever it is doing;
//! - and the file must not be locked: every writer holds an exclusive advisory lock on
//!   its temporary file until the rename, which the kernel drops when the writer dies.
//!   This second check covers a writer whose pid means nothing here (another pid
//!   namespace sharing the directory, e.g. two containers on one volume).
//!
//! A pid reused by an unrelated process makes a stale file look live: it is kept, and
//! removed by a later save once that pid is gone. Keeping a file is always safe;
//! removing a live writer's file never happens. On platforms without `kill` (not Unix)
//! only the lock decides.

use std::fs::{self, File, TryLockError};
use std::io;
use std::path::Path;

/// The temporary file name for a save of `target` (a file name) by `pid`, attempt `n`.
pub(crate) fn temp_name(target: &str, pid: u32, n: u64) -> String {
    format!(".{target}.tmp-{pid}-{n}")
}

/// `(target file name, pid)` when `name` is a temporary file name.
pub(crate) fn parse_temp_name(name: &str) -> Option<(&str, u32)> {
    let rest = name.strip_prefix('.')?;
    let at = rest.rfind(".tmp-")?;
    let (target, suffix) = (&rest[..at], &rest[at + ".tmp-".len()..]);
    let (pid, n) = suffix.split_once('-')?;
    let decimal = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if target.is_empty() || !decimal(pid) || !decimal(n) {
        return None;
    }
    n.parse::<u64>().ok()?;
    Some((target, pid.parse().ok()?))
}

/// Whether process `pid` may be alive. Errs on the side of "alive": only a definite
/// "no such process" says otherwise.
#[cfg(unix)]
fn may_be_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    if pid <= 0 {
        return true;
    }
    // SAFETY: kill with signal 0 sends nothing; it only checks that the process exists.
    let status = unsafe { libc::kill(pid, 0) };
    status == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Without `kill`, liveness is left to the lock.
#[cfg(not(unix))]
fn may_be_alive(_pid: u32) -> bool {
    false
}

/// Removes the temporary files of `target` (a file name) in `dir` whose writer is gone
/// (see the module docs). Returns how many were removed. Errors reading the directory
/// or removing a file are ignored: cleaning up is a courtesy, never a reason for the
/// save itself to fail.
pub(crate) fn remove_stale_temp_files(dir: &Path, target: &str) -> usize {
    remove_stale_temp_files_of(dir, |of| of == target)
}

/// [`remove_stale_temp_files`] for every target whose file name `is_target` accepts (a
/// checkpoint folder cleans up after killed saves of any of its steps).
pub(crate) fn remove_stale_temp_files_of(dir: &Path, is_target: impl Fn(&str) -> bool) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let me = std::process::id();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((of, pid)) = name.to_str().and_then(parse_temp_name) else {
            continue;
        };
        if !is_target(of) || pid == me || may_be_alive(pid) {
            continue;
        }
        let path = entry.path();
        let Ok(file) = File::open(&path) else {
            continue;
        };
        match file.try_lock() {
            Ok(()) => {
                if fs::remove_file(&path).is_ok() {
                    removed += 1;
                }
            }
            Err(TryLockError::WouldBlock | TryLockError::Error(_)) => {}
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_others_do_not_parse() {
        let name = temp_name("ck.safetensors", 4242, 7);
        assert_eq!(name, ".ck.safetensors.tmp-4242-7");
        assert_eq!(parse_temp_name(&name), Some(("ck.safetensors", 4242)));
        assert_eq!(
            parse_temp_name(".a.tmp-1.tmp-2-3"),
            Some(("a.tmp-1", 2)),
            "the last .tmp- separates"
        );
        for other in [
            "ck.safetensors",
            ".ck.safetensors",
            ".ck.safetensors.tmp-",
            ".ck.safetensors.tmp-12",
            ".ck.safetensors.tmp-12-",
            ".ck.safetensors.tmp-x-1",
            ".ck.safetensors.tmp-1-2-3",
            ".ck.safetensors.tmp-99999999999-1",
            "..tmp-1-2",
        ] {
            assert_eq!(parse_temp_name(other), None, "{other}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn only_dead_writers_files_of_the_same_target_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        // A process that has exited and been reaped: its pid is dead.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let live = std::process::id();
        let files = [
            (temp_name("ck", dead, 0), false),
            (temp_name("ck", live, 0), true),
            (temp_name("other", dead, 0), true),
            ("ck".to_string(), true),
        ];
        for (name, _) in &files {
            fs::write(dir.path().join(name), b"x").unwrap();
        }
        // A dead pid whose file is still locked (its writer lives elsewhere): kept.
        let locked_name = temp_name("ck", dead, 1);
        let locked = File::create(dir.path().join(&locked_name)).unwrap();
        locked.lock().unwrap();
        assert_eq!(remove_stale_temp_files(dir.path(), "ck"), 1);
        for (name, kept) in &files {
            assert_eq!(dir.path().join(name).exists(), *kept, "{name}");
        }
        assert!(dir.path().join(&locked_name).exists());
        drop(locked);
        assert_eq!(remove_stale_temp_files(dir.path(), "ck"), 1);
    }
}
