//! Elastic restarts of the training examples (issue 27, items 2 and 5), run as a user
//! runs them: `train_resume`, `ddp_train` and `train_gpt` (issue 30) processes started with one command line,
//! killed with SIGKILL at random steps, and started again with the same line, as
//! torchrun's `--max-restarts` does. After the last restart the CSV is the
//! uninterrupted run's, byte for byte. Also: a damaged newest checkpoint is skipped
//! with a warning naming it, `--keep` leaves the newest K, and a path the run cannot
//! write ends it within seconds, before step 1, leaving nothing behind.
//!
//! The examples are built by this test (`cargo build --example`, same profile and
//! features) if `cargo test` did not build them already.

#![cfg(unix)]

use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

use crate::support;
use support::example;

/// `program args` in `dir`, to completion.
fn run(program: &Path, dir: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("start the example")
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

/// Rows (lines after the header) in the CSV at `path`; 0 when it is not there yet.
fn csv_rows(path: &Path) -> usize {
    fs::read_to_string(path).map_or(0, |t| t.lines().count().saturating_sub(1))
}

/// A small pseudo-random generator, seeded from the clock and printed, so a failure
/// names the kill steps it used.
struct Dice(u64);

impl Dice {
    fn new() -> Self {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        Dice(u64::from(nanos) | 1)
    }

    /// A number in `1..=n`.
    fn roll(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n + 1
    }
}

/// Starts `program args` in `dir`, lets it run until its CSV `csv` holds at least
/// `rows` rows, then kills it with SIGKILL. Returns the rows at the kill and whether
/// the process was still running (a kill that landed mid-run), and its output.
fn kill_at(
    program: &Path,
    dir: &Path,
    args: &[&str],
    csv: &Path,
    rows: usize,
) -> (usize, bool, String) {
    let mut child: Child = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the example");
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut landed = false;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if csv_rows(csv) >= rows {
            child.kill().unwrap();
            landed = true;
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the run never reached {rows} rows"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    child.wait().unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    (csv_rows(csv), landed, out)
}

/// Runs the elastic command line `line(restart)` again and again in `dir`, killing it
/// at random steps (the first after step `save_every`, so a checkpoint exists; at most
/// `max_kills` times), until a run completes; checks the CSV equals `reference`'s bytes, that kills landed mid-run
/// and that every restart resumed a checkpoint. `line` may change the world size
/// between restarts, never anything else.
fn kill_and_restart(
    program: &Path,
    dir: &Path,
    (steps, save_every, max_kills): (usize, usize, usize),
    line: impl Fn(usize) -> Vec<String>,
    reference: &Path,
) {
    let mut dice = Dice::new();
    let seed = dice.0;
    let csv = dir.join("run.csv");
    let (mut rows, mut kills, mut resumes) = (0, 0, 0);
    let mut restart = 0;
    let mut killed_at = Vec::new();
    loop {
        let args = line(restart);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let spread = (steps / (max_kills + 1)).max(2) as u64;
        let target = (rows + dice.roll(spread) as usize).max(save_every + 1);
        if kills >= max_kills || target >= steps {
            let last = run(program, dir, &args);
            let out = text(&last);
            assert!(
                last.status.success(),
                "dice {seed:#x}: the last run failed:\n{out}"
            );
            resumes += usize::from(out.contains("resumed "));
            break;
        }
        let (at, landed, out) = kill_at(program, dir, &args, &csv, target);
        assert!(
            !out.contains("error"),
            "dice {seed:#x}: restart {restart}:\n{out}"
        );
        resumes += usize::from(out.contains("resumed "));
        kills += usize::from(landed);
        if landed {
            killed_at.push(at);
        }
        rows = at;
        restart += 1;
    }
    println!("dice {seed:#x}: killed after steps {killed_at:?}, {restart} restarts");
    assert!(kills >= 1, "dice {seed:#x}: no kill landed mid-run");
    assert_eq!(resumes, restart, "dice {seed:#x}: a restart did not resume");
    let (got, want) = (fs::read(&csv).unwrap(), fs::read(reference).unwrap());
    assert!(
        got == want,
        "dice {seed:#x}: after {kills} kills the CSV differs from the uninterrupted run's:\n{}\n---\n{}",
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

const RUN: [&str; 6] = ["--seed", "7", "--steps", "60", "--batch-size", "32"];

#[test]
fn train_resume_killed_at_random_steps_and_restarted_writes_the_uninterrupted_csv() {
    let program = example("train_resume");
    let dir = tempfile::tempdir().unwrap();
    let straight = run(
        &program,
        dir.path(),
        &[&RUN[..], &["--out", "straight.csv"]].concat(),
    );
    assert!(straight.status.success(), "{}", text(&straight));
    let elastic = [
        "--checkpoint-dir",
        "ck",
        "--save-every",
        "7",
        "--keep",
        "2",
        "--resume-latest",
        "--log-every",
        "1",
        "--out",
        "run.csv",
    ];
    let line = |_| strings(&[&RUN[..], &elastic].concat());
    let straight = dir.path().join("straight.csv");
    kill_and_restart(&program, dir.path(), (60, 7, 3), line, &straight);
    let names: Vec<_> = fs::read_dir(dir.path().join("ck"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        names.len() <= 2 && names.contains(&"step-00000060.safetensors".into()),
        "{names:?}"
    );
}

#[test]
fn ddp_train_killed_and_restarted_on_2_and_4_thread_ranks_writes_the_1_rank_csv() {
    ddp_kill_and_restart(3);
}

#[test]
#[ignore = "heavy: 10 rounds of up to 8 kills each"]
fn ddp_train_killed_many_times_always_writes_the_1_rank_csv() {
    for _ in 0..10 {
        ddp_kill_and_restart(8);
    }
}

/// `ddp_train --invariant` killed at random steps at most `max_kills` times, restarted
/// on 2 and 4 thread ranks in turn, against the uninterrupted 1-rank CSV.
fn ddp_kill_and_restart(max_kills: usize) {
    let program = example("ddp_train");
    let dir = tempfile::tempdir().unwrap();
    let one_rank = [
        &RUN[..],
        &["--invariant", "--world-size", "1", "--out", "w1.csv"],
    ]
    .concat();
    let straight = run(&program, dir.path(), &one_rank);
    assert!(straight.status.success(), "{}", text(&straight));
    let elastic = [
        "--invariant",
        "--checkpoint-dir",
        "ck",
        "--save-every",
        "5",
        "--resume-latest",
        "--out",
        "run.csv",
    ];
    // An elastic job may come back with fewer or more ranks: 2, 4, 2, 4, ...
    let line = |restart: usize| {
        let world = if restart.is_multiple_of(2) { "2" } else { "4" };
        strings(&[&RUN[..], &elastic, &["--world-size", world]].concat())
    };
    let w1 = dir.path().join("w1.csv");
    kill_and_restart(&program, dir.path(), (60, 5, max_kills), line, &w1);
}

/// A tiny `train_gpt` run (issue 30): 1 layer, 2 heads, width 16, context 8, batches of
/// 8 sequences of data/emma.txt, no sample at the end.
const GPT_RUN: [&str; 18] = [
    "--seed",
    "7",
    "--steps",
    "40",
    "--batch-size",
    "8",
    "--layers",
    "1",
    "--heads",
    "2",
    "--width",
    "16",
    "--context",
    "8",
    "--block-size",
    "8",
    "--sample",
    "0",
];

#[test]
fn train_gpt_killed_and_restarted_on_2_and_4_thread_ranks_writes_the_1_rank_csv() {
    let program = example("train_gpt");
    let dir = tempfile::tempdir().unwrap();
    let ranks =
        |world: &'static str| ["--backend", "threads", "--invariant", "--world-size", world];
    let one_rank = [&GPT_RUN[..], &ranks("1"), &["--out", "w1.csv"]].concat();
    let straight = run(&program, dir.path(), &one_rank);
    assert!(straight.status.success(), "{}", text(&straight));
    let elastic = [
        "--checkpoint-dir",
        "ck",
        "--save-every",
        "4",
        "--resume-latest",
        "--out",
        "run.csv",
    ];
    let line = |restart: usize| {
        let world = if restart.is_multiple_of(2) { "2" } else { "4" };
        strings(&[&GPT_RUN[..], &elastic, &ranks(world)].concat())
    };
    let w1 = dir.path().join("w1.csv");
    kill_and_restart(&program, dir.path(), (40, 4, 2), line, &w1);
}

#[test]
fn a_damaged_newest_checkpoint_is_skipped_with_a_warning_and_keep_leaves_the_newest_k() {
    let program = example("train_resume");
    let dir = tempfile::tempdir().unwrap();
    let line = |steps: &str| {
        strings(&[
            "--seed",
            "7",
            "--batch-size",
            "32",
            "--steps",
            steps,
            "--checkpoint-dir",
            "ck",
            "--save-every",
            "10",
            "--keep",
            "2",
            "--resume-latest",
            "--out",
            "run.csv",
        ])
    };
    let first = line("30");
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    let out = run(&program, dir.path(), &first);
    assert!(out.status.success(), "{}", text(&out));
    let ck = dir.path().join("ck");
    let mut names: Vec<_> = fs::read_dir(&ck)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["step-00000020.safetensors", "step-00000030.safetensors"]
    );

    // Run again with the same line: the run had finished, so nothing is trained and
    // the CSV is rewritten from the checkpoint, the same bytes.
    let before = fs::read(dir.path().join("run.csv")).unwrap();
    let again = run(&program, dir.path(), &first);
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        text(&again).contains("nothing left to train"),
        "{}",
        text(&again)
    );
    assert_eq!(fs::read(dir.path().join("run.csv")).unwrap(), before);

    // Flip a bit of the newest checkpoint and extend the run: step 30's file is
    // skipped with a warning naming it and why, and the run continues from step 20.
    let newest = ck.join("step-00000030.safetensors");
    let mut bytes = fs::read(&newest).unwrap();
    let at = bytes.len() - 3;
    bytes[at] ^= 0x01;
    fs::write(&newest, bytes).unwrap();
    let longer = line("40");
    let longer: Vec<&str> = longer.iter().map(String::as_str).collect();
    let out = run(&program, dir.path(), &longer);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains(&format!(
            "warning: skipping the checkpoint {}",
            Path::new("ck").join("step-00000030.safetensors").display()
        )) && said.contains("corrupted"),
        "{said}"
    );
    assert!(said.contains("at step 20"), "{said}");
    let straight = run(
        &program,
        dir.path(),
        &[
            "--seed",
            "7",
            "--batch-size",
            "32",
            "--steps",
            "40",
            "--out",
            "straight.csv",
        ],
    );
    assert!(straight.status.success());
    assert_eq!(
        fs::read(dir.path().join("run.csv")).unwrap(),
        fs::read(dir.path().join("straight.csv")).unwrap()
    );
}

/// Runs `program args` in a fresh folder, expecting a failure within 5 s before step 1
/// whose message contains `names`; returns the folder's contents afterwards.
fn fails_fast(program: &Path, args: &[&str], names: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = Command::new(program)
        .args(args)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    let said = text(&out);
    assert!(!out.status.success(), "{args:?} succeeded:\n{said}");
    assert!(
        elapsed < Duration::from_secs(5),
        "{args:?} took {elapsed:?}:\n{said}"
    );
    assert!(
        !said.contains("step "),
        "{args:?} trained before failing:\n{said}"
    );
    assert!(
        said.contains(names),
        "{args:?} does not name {names}:\n{said}"
    );
    fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

#[test]
fn a_path_the_run_cannot_write_ends_it_within_5_s_before_step_1() {
    let file = tempfile::NamedTempFile::new().unwrap();
    let under_a_file = file.path().join("ck");
    let under_a_file = under_a_file.to_str().unwrap();
    let long = ["--steps", "1000000"];
    for program in [
        example("train_resume"),
        example("ddp_train"),
        example("train_gpt"),
    ] {
        for bad in [
            &["--out", "/proc/x/y.csv"][..],
            &["--out", "/proc/version"],
            &["--checkpoint", "/nonexistent/ck.safetensors"],
            &[
                "--save-at",
                "5",
                "--checkpoint",
                "/nonexistent/ck.safetensors",
            ],
            &["--checkpoint-dir", "/proc/x/ck"],
            &["--resume-latest", "--checkpoint-dir", under_a_file],
            &[
                "--out",
                "ok.csv",
                "--checkpoint-dir",
                "ck",
                "--plot",
                "/proc/x/p.png",
            ],
        ] {
            let args = [&long[..], bad].concat();
            let path = bad[bad.len() - 1];
            let left = fails_fast(&program, &args, path);
            assert!(left.is_empty(), "{args:?} left {left:?} behind");
        }
    }
    let ddp = example("ddp_train");
    let left = fails_fast(
        &ddp,
        &["--world-size", "2", "--out", "/proc/x/y.csv"],
        "/proc/x/y.csv",
    );
    assert!(left.is_empty());
}
