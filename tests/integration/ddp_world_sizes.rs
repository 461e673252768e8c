//! `ddp_train --invariant` at world sizes that are not powers of two (issue 28, items 1
//! and 2), run as a user runs it: 3, 5, 6 and 7 thread ranks write the one-rank CSV's
//! bytes, in default and in portable arithmetic; checkpoints move from 4 ranks to 3,
//! 3 to 2, 2 to 5 and 5 to 1 with the straight run's remaining rows; 9 ranks of 8
//! micro-shards are refused naming both numbers. The default run's batch of 128 rows
//! divides by none of 3, 5, 6 and 7, and its epoch of 4000 samples ends on a short
//! batch of 32 rows (step 32), which every run here crosses.
//!
//! The example is built by this test (`cargo build --example`, same profile and
//! features) if `cargo test` did not build it already.

#![cfg(unix)]

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use crate::support;
use support::example;

const STEPS: &str = "40";

/// `ddp_train --invariant --seed 7 args` in `dir`, which must succeed.
fn ddp_train(dir: &Path, args: &[&str]) -> Output {
    let output = Command::new(example("ddp_train"))
        .args(["--backend", "threads", "--invariant", "--seed", "7"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("start ddp_train");
    assert!(
        output.status.success(),
        "ddp_train {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn csv(dir: &Path, name: &str) -> String {
    fs::read_to_string(dir.join(name)).unwrap()
}

#[test]
fn ddp_train_invariant_on_3_5_6_and_7_ranks_writes_the_1_rank_csv() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut references = Vec::new();
    for arithmetic in [None, Some("--portable")] {
        let tag = arithmetic.map_or("default", |_| "portable");
        let extra: Vec<&str> = arithmetic.into_iter().collect();
        let one = format!("{tag}-w1.csv");
        let line = |world: &str, out: &str| {
            let mut line = vec!["--world-size", world, "--steps", STEPS, "--out"];
            line.push(out);
            line.extend(&extra);
            line.iter().map(|s| s.to_string()).collect::<Vec<_>>()
        };
        let args = line("1", &one);
        ddp_train(d, &args.iter().map(String::as_str).collect::<Vec<_>>());
        let reference = csv(d, &one);
        assert_eq!(reference.lines().count(), 41, "{tag}: a header and 40 rows");
        for world in ["3", "5", "6", "7"] {
            let out = format!("{tag}-w{world}.csv");
            let args = line(world, &out);
            ddp_train(d, &args.iter().map(String::as_str).collect::<Vec<_>>());
            assert!(
                csv(d, &out) == reference,
                "{tag}: {world} ranks wrote another CSV than 1 rank"
            );
        }
        references.push(reference);
    }
    // Portable arithmetic reached the ranks: its curve is not the default one.
    assert_ne!(references[0], references[1]);
}

#[test]
fn ddp_train_checkpoints_move_between_uneven_world_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ddp_train(
        d,
        &["--world-size", "1", "--steps", STEPS, "--out", "w1.csv"],
    );
    let straight = csv(d, "w1.csv");
    // Steps 21..40: lines 22..41 of the straight CSV (line 1 is the header).
    let remaining: Vec<&str> = straight.lines().skip(21).collect();
    assert_eq!(remaining.len(), 20);
    for (save, resume) in [("4", "3"), ("3", "2"), ("2", "5"), ("5", "1")] {
        let ck = format!("w{save}.safetensors");
        let saved = format!("s{save}.csv");
        ddp_train(
            d,
            &[
                "--world-size",
                save,
                "--steps",
                STEPS,
                "--save-at",
                "20",
                "--checkpoint",
                &ck,
                "--out",
                &saved,
            ],
        );
        let out = format!("w{save}-to-w{resume}.csv");
        ddp_train(
            d,
            &[
                "--world-size",
                resume,
                "--resume",
                &ck,
                "--steps",
                STEPS,
                "--out",
                &out,
            ],
        );
        let resumed = csv(d, &out);
        let rows: Vec<&str> = resumed.lines().skip(1).collect();
        assert_eq!(
            rows, remaining,
            "saved on {save} ranks, resumed on {resume}: steps 21..40 differ from the straight run's"
        );
    }
}

#[test]
fn ddp_train_refuses_9_ranks_of_8_micro_shards_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(example("ddp_train"))
        .args([
            "--backend",
            "threads",
            "--invariant",
            "--world-size",
            "9",
            "--steps",
            "2",
        ])
        .current_dir(dir.path())
        .output()
        .expect("start ddp_train");
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "9 ranks of 8 micro-shards ran: {text}"
    );
    assert!(
        text.contains("world size of 9 is more than the 8 micro-shards"),
        "{text}"
    );
    assert!(
        fs::read_dir(dir.path()).unwrap().next().is_none(),
        "it wrote nothing"
    );
}
