//! Tests that need a process of their own inside a crate's one integration-test binary.
//!
//! Each crate builds its integration tests as one binary (one link instead of one per
//! file), and libtest runs the tests of a binary as threads of one process. A test that
//! changes process-wide state (the default generators, the deterministic-algorithms
//! switch, portable arithmetic, the audit sink, an environment variable) would change it
//! under every other test running at that moment. Such a test starts with
//! [`own_process!`](crate::own_process): the first call re-runs the test binary with
//! only that test selected (`--exact`) and one test thread, reports the child's output
//! and fails if the child failed; the child, told by an environment variable that it is
//! the one, runs the body.

use std::process::Command;

/// Set in the child to the name of the test it runs (see the module docs).
pub const OWN_PROCESS_ENV: &str = "DITTO_TEST_OWN_PROCESS";

/// The name libtest gives the test `name` of module `module_path` (as `module_path!()`
/// writes it, the test binary's crate first), for `--exact`: the path without the
/// crate, e.g. `checkpoint_sigkill::save_loop_child`.
#[must_use]
pub fn exact_name(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_crate, module)) => format!("{module}::{name}"),
        None => name.to_owned(),
    }
}

/// The body of [`own_process!`](crate::own_process): `true` in the child (run the
/// test's body), `false` in the parent once the child passed.
///
/// # Panics
/// In the parent, if the child cannot be started or fails (a test harness: the panic is
/// the test's failure, and it carries the child's output).
#[must_use]
pub fn run_in_own_process(module_path: &str, name: &str) -> bool {
    let test = exact_name(module_path, name);
    if std::env::var(OWN_PROCESS_ENV).is_ok_and(|running| running == test) {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(exe)
        .args(["--exact", &test, "--include-ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(OWN_PROCESS_ENV, &test)
        .output()
        .unwrap_or_else(|e| panic!("cannot start {test} in a process of its own: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{test}, run in a process of its own, failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    // A filter that matched nothing would pass silently: the child must have run it.
    assert!(
        stdout.contains("1 passed"),
        "{test} did not run in its own process (wrong name?):\n{stdout}"
    );
    print!("{stdout}");
    false
}

/// What a test returns when its body ran elsewhere: the parent of an
/// [`own_process!`](crate::own_process) test passes once its child passed, whether the
/// test returns `()` or a `Result`.
pub trait TestOutcome {
    /// The value of a passed test.
    fn passed() -> Self;
}

impl TestOutcome for () {
    fn passed() {}
}

impl<E> TestOutcome for Result<(), E> {
    fn passed() -> Self {
        Ok(())
    }
}

/// First line of a test that changes process-wide state: runs the test in a process of
/// its own (see the module docs). Give the test function's name.
///
/// ```ignore
/// #[test]
/// fn error_mode_refuses_atomics() {
///     test_support::own_process!(error_mode_refuses_atomics);
///     use_deterministic_algorithms(DeterministicMode::Error);
///     // ...
/// }
/// ```
#[macro_export]
macro_rules! own_process {
    ($test:ident) => {
        if !$crate::run_in_own_process(module_path!(), stringify!($test)) {
            return $crate::TestOutcome::passed();
        }
    };
}
