//! `train_gpt` as nanoGPT users run it (issue 42), run as a user runs it: held-out
//! evaluation every `--eval-interval` steps never changes the training curve, a run
//! killed and resumed with evaluation on writes the straight run's CSV (validation
//! losses included) and `identical: yes`, `--eval-only` evaluates a checkpoint
//! without training, `--save-best` keeps the lowest validation loss, a recipe resolves
//! to nanoGPT's values, and bad combinations fail before any training with exit 2 or 3.

#![cfg(unix)]

use std::path::Path;
use std::process::{Command, Output};

use crate::support::example;

/// A tiny GPT on data/emma.txt (its last 10% held out): 1 layer, 2 heads, width 16,
/// context 8, batches of 8, no sample at the end.
const TINY: [&str; 16] = [
    "--seed",
    "7",
    "--steps",
    "30",
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
];

/// Every 10 steps, 2 batches of each split.
const EVAL: [&str; 4] = ["--eval-interval", "10", "--eval-iters", "2"];

fn run(dir: &Path, args: &[&[&str]]) -> Output {
    Command::new(example("train_gpt"))
        .args(args.concat())
        .args(["--sample", "0"])
        .current_dir(dir)
        .output()
        .expect("start train_gpt")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        stdout(output),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The `step,loss` columns of a CSV.
fn losses(path: &Path) -> Vec<String> {
    let csv = std::fs::read_to_string(path).unwrap();
    csv.lines()
        .skip(1)
        .map(|row| row.split(',').take(2).collect::<Vec<_>>().join(","))
        .collect()
}

#[test]
fn evaluation_never_changes_the_curve_and_a_resume_with_it_is_identical() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plain = run(d, &[&TINY, &["--out", "plain.csv"]]);
    assert!(plain.status.success(), "{}", text(&plain));
    let evaluated = run(d, &[&TINY, &EVAL, &["--out", "eval.csv"]]);
    assert!(evaluated.status.success(), "{}", text(&evaluated));
    assert_eq!(losses(&d.join("eval.csv")), losses(&d.join("plain.csv")));
    let csv = std::fs::read_to_string(d.join("eval.csv")).unwrap();
    assert!(csv.starts_with("step,loss,val_loss\n1,"), "{csv}");
    let val_rows: Vec<&str> = csv.lines().filter(|r| !r.ends_with(',')).skip(1).collect();
    assert_eq!(val_rows.len(), 3, "steps 10, 20 and 30 evaluated: {csv}");
    let at_20 = stdout(&evaluated)
        .lines()
        .find(|l| l.starts_with("step 20: train loss"))
        .expect("the evaluation line of step 20")
        .to_string();

    // Killed at step 20 (after its evaluation), resumed with evaluation on.
    let first = [
        &TINY[..],
        &EVAL,
        &["--save-at", "20", "--checkpoint", "k20.safetensors"],
    ];
    assert!(run(d, &first).status.success());
    let resumed = run(
        d,
        &[
            &EVAL,
            &[
                "--resume",
                "k20.safetensors",
                "--steps",
                "30",
                "--out",
                "rest.csv",
                "--compare",
                "eval.csv",
            ],
        ],
    );
    assert!(
        stdout(&resumed).contains("identical: yes"),
        "{}",
        text(&resumed)
    );
    let rest = std::fs::read_to_string(d.join("rest.csv")).unwrap();
    let straight_rows: Vec<&str> = csv.lines().skip(21).collect();
    assert_eq!(rest.lines().skip(1).collect::<Vec<_>>(), straight_rows);

    // The checkpoint evaluated alone: the straight run's numbers at step 20.
    let only = run(d, &[&EVAL, &["--resume", "k20.safetensors", "--eval-only"]]);
    assert!(only.status.success(), "{}", text(&only));
    assert!(
        stdout(&only).contains(&at_20),
        "{} vs {at_20}",
        stdout(&only)
    );
    assert!(
        !stdout(&only).contains("step    21"),
        "trained: {}",
        stdout(&only)
    );
}

#[test]
fn save_best_keeps_the_lowest_validation_loss() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let best = [&TINY[..], &EVAL, &["--checkpoint-dir", "ck", "--save-best"]];
    let out = run(d, &best);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout(&out).contains("best.safetensors (val loss"),
        "{}",
        stdout(&out)
    );
    assert!(d.join("ck/best.safetensors").exists());
    // A fresh run does not overwrite another run's best checkpoint.
    std::fs::remove_file(d.join("ck/step-00000030.safetensors")).unwrap();
    let again = run(d, &best);
    assert_eq!(again.status.code(), Some(3), "{}", text(&again));
    assert!(
        text(&again).contains("another run's best checkpoint"),
        "{}",
        text(&again)
    );
}

#[test]
fn a_recipe_resolves_to_nanogpts_values_and_flags_override_it() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = [
        "--recipe",
        "shakespeare-char-cpu",
        "--steps",
        "1",
        "--eval-iters",
        "1",
    ];
    let out = run(
        dir.path(),
        &[&recipe, &["--checkpoint-dir", "out", "--width", "64"]],
    );
    assert!(out.status.success(), "{}", text(&out));
    let header = stdout(&out).lines().next().unwrap_or_default().to_string();
    for part in [
        "4 layers x 4 heads x width 64, context 64, bias false, f32",
        "dropout 0 | AdamW lr 0.001 betas (0.9, 0.99) wd 0.1",
        "warm-up 100 then cosine to 0.0001 after 2000 steps | clip 1 | batch 12",
        "tinyshakespeare.txt (1115394 bytes, 111540 held out)",
    ] {
        assert!(header.contains(part), "{part:?} not in {header}");
    }
    assert!(
        stdout(&out).contains("step 1: train loss"),
        "{}",
        stdout(&out)
    );
    assert!(dir.path().join("out/best.safetensors").exists());
}

#[test]
fn bad_combinations_fail_before_training() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("short.txt"), "a few words of text, ".repeat(30)).unwrap();
    for (args, code, expected) in [
        (&["--eval-only"][..], 2, "expected --resume CK"),
        (
            &["--val-fraction", "1.0"],
            2,
            "expected a number in [0, 0.5]",
        ),
        (
            &["--save-best", "--eval-interval", "5"],
            2,
            "--save-best keeps best.safetensors",
        ),
        (&["--data", "short.txt"], 3, "fewer than one batch"),
        (
            &["--val-fraction", "0", "--eval-interval", "5"],
            3,
            "expected --val-fraction > 0",
        ),
    ] {
        let out = run(d, &[&TINY, args]);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(expected), "{args:?}: {}", text(&out));
        assert!(
            !stdout(&out).contains("step    "),
            "{args:?} trained: {}",
            text(&out)
        );
    }
}
