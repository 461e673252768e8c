//! Waiting for a child process with a time limit, as the tests that run ranks in
//! processes of their own do.

use std::process::Child;
use std::time::{Duration, Instant};

/// Waits for `child` (started with piped stdout and stderr) at most `limit`; its stdout,
/// its stderr and whether it succeeded.
///
/// # Panics
/// Past `limit`, after killing `child`, with its output so far; `what` names it.
pub fn wait_with_limit(mut child: Child, what: &str, limit: Duration) -> (String, String, bool) {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what}: still running after {limit:?}\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}
