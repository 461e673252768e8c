//! Issue 29's acceptance: the demo (`train_resume`: 64-256-256-10 MLP, batch 128,
//! dropout, SGD with momentum) run with `RAYON_NUM_THREADS` 1, 2, 3 and 8 writes the same
//! CSV bytes (every step's loss, bit for bit), with the default arithmetic and with
//! `--portable`. Every op that fans out over rayon (the blocked gemm, the portable
//! matmul's tiles, elementwise ops, dropout, the optimiser) must cut its work by the
//! sizes alone for this to hold. At the demo's sizes none of them leaves the calling
//! thread any more (each fans out only where a second thread pays; benches/RESULTS.md),
//! so `crates/nn-mini/tests/integration/wide_mlp_threads.rs` checks the same at the
//! large benchmark model's sizes, where every one of them does.
//!
//! The example is built by this test (`cargo build --example`, same profile and features)
//! if `cargo test` did not build it already.

use std::fs;
use std::process::Command;

use crate::support::example;

const THREADS: [&str; 4] = ["1", "2", "3", "8"];

#[test]
fn train_resume_writes_the_same_csv_for_1_2_3_and_8_threads() {
    let program = example("train_resume");
    let dir = tempfile::tempdir().unwrap();
    for portable in [false, true] {
        let mut csvs = Vec::new();
        for threads in THREADS {
            let out = dir.path().join(format!("t{threads}-p{portable}.csv"));
            let mut command = Command::new(&program);
            command
                .args(["--device", "cpu", "--seed", "7", "--steps", "40", "--out"])
                .arg(&out)
                .env("RAYON_NUM_THREADS", threads);
            if portable {
                command.arg("--portable");
            }
            let output = command.output().expect("start train_resume");
            assert!(
                output.status.success(),
                "train_resume (RAYON_NUM_THREADS={threads}, portable: {portable}) failed:\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            csvs.push(fs::read(&out).unwrap());
        }
        assert_eq!(
            csvs[0].iter().filter(|&&b| b == b'\n').count(),
            41,
            "a header and 40 steps"
        );
        for (threads, csv) in THREADS.iter().zip(&csvs).skip(1) {
            assert!(
                *csv == csvs[0],
                "portable: {portable}: the CSV of {threads} threads differs from 1 thread's"
            );
        }
    }
}
