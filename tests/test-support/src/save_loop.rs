//! `SaveLoopChild`: a child process that saves a checkpoint again and again, to be killed
//! with SIGKILL at a moment the test picks.
//!
//! A checkpoint must survive its writer being killed at any instant: the file at the
//! path is the old checkpoint or the new one, never a torn one, and the temporary file
//! a killed save leaves behind is removed by the next save. nn-mini's test kills a
//! process saving with `Checkpoint::save`; distributed's kills a data parallel run
//! saving with `DdpTrainer::save`. Both need the same harness: run the test binary
//! itself as the child (one of its ignored tests, told the target by an environment
//! variable), wait for a first complete save, kill it, reap it, and count the temporary
//! files left beside the target.

use std::io::{BufRead, BufReader, Lines};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

/// The line the child prints after each complete save.
pub const SAVED: &str = "saved";

/// A running child that saves in a loop (see the module docs).
#[derive(Debug)]
pub struct SaveLoopChild {
    child: Child,
    /// The child's stdout, kept open until the kill: a closed pipe would end the child
    /// on its next `println!`, before the test chose the moment.
    _stdout: Lines<BufReader<ChildStdout>>,
}

impl SaveLoopChild {
    /// Runs `test_name`, an ignored test of the test binary that calls this, in a child
    /// process with `target_env` set to `target`, and returns once the child has printed
    /// [`SAVED`]: at least one complete save is at the target. The child test prints
    /// [`SAVED`] after every save and does nothing when `target_env` is unset, so the
    /// ordinary test run passes over it.
    ///
    /// # Panics
    /// If the child cannot be started or ends before its first save (a test harness:
    /// the panic is the test's failure).
    #[must_use]
    pub fn start(test_name: &str, target_env: &str, target: &Path) -> SaveLoopChild {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut child = Command::new(exe)
            .args(["--exact", test_name, "--ignored", "--nocapture"])
            .env(target_env, target)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the child test {test_name}: {e}"));
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        assert!(
            lines.any(|l| l.is_ok_and(|l| l == SAVED)),
            "the child test {test_name} ended before its first save to {}",
            target.display()
        );
        SaveLoopChild {
            child,
            _stdout: lines,
        }
    }

    /// Kills the child with SIGKILL and reaps it, so its pid is dead, not a zombie: a
    /// later save sees its temporary file as a dead writer's and removes it.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL the child");
        self.child.wait().expect("reap the child");
    }
}

/// The temporary files `Checkpoint::save` has beside `target` (named
/// `.{file name}.tmp-{pid}-{n}`): what saves that were killed left behind.
///
/// # Panics
/// If `target` has no file name or its directory cannot be read.
#[must_use]
pub fn temp_files(target: &Path) -> Vec<String> {
    let name = target.file_name().expect("a file path").to_string_lossy();
    let prefix = format!(".{name}.tmp-");
    let dir = target.parent().expect("a file path");
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.starts_with(&prefix))
        .collect()
}
