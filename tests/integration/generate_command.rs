//! `generate` run as a user runs it (issue 44): requests from a JSON-lines file, texts
//! out in input order, the same bytes at any batch size; a bad request line is named
//! and refused (exit 2) before anything is generated, a missing checkpoint or one that
//! is not a GPT's is exit 3.

#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::example;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/nn-mini/tests/fixtures")
        .join(name)
}

fn generate(dir: &Path, checkpoint: &Path, prompts: &str, extra: &[&str]) -> Output {
    std::fs::write(dir.join("in.jsonl"), prompts).unwrap();
    Command::new(example("generate"))
        .arg("--checkpoint")
        .arg(checkpoint)
        .args(["--prompts", "in.jsonl", "--out", "out.jsonl"])
        .args(extra)
        .current_dir(dir)
        .output()
        .expect("start generate")
}

const REQUESTS: &str = r#"{"id": "a", "prompt": "Emma", "seed": 1, "max_tokens": 20}
{"id": 2, "prompt": "She was", "seed": 2, "temperature": 0, "max_tokens": 30}
{"id": "c", "prompt": "x", "seed": 3, "top_k": 5, "top_p": 0.8, "max_tokens": 70}

{"id": "d", "prompt": "Mr. Knightley", "seed": 4, "temperature": 0.5, "stop": "e"}
"#;

#[test]
fn texts_come_out_in_input_order_the_same_at_any_batch_size() {
    let dir = tempfile::tempdir().unwrap();
    let ck = fixture("gpt_portable_seed7_step3.safetensors");
    let mut outputs = Vec::new();
    for batch in ["1", "3"] {
        let out = generate(dir.path(), &ck, REQUESTS, &["--batch-size", batch]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        outputs.push(std::fs::read_to_string(dir.path().join("out.jsonl")).unwrap());
    }
    assert_eq!(outputs[0], outputs[1]);
    let lines: Vec<serde_json::Value> = outputs[0]
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<String> = lines.iter().map(|l| l["id"].to_string()).collect();
    assert_eq!(ids, [r#""a""#, "2", r#""c""#, r#""d""#]);
    assert!(lines[2]["text"].as_str().unwrap().chars().count() <= 70);
}

#[test]
fn bad_requests_and_checkpoints_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ck = fixture("gpt_portable_seed7_step3.safetensors");
    let good = r#"{"id": 1, "prompt": "a", "seed": 1, "max_tokens": 3}"#;
    for (line, expected) in [
        ("{not json", "not a request"),
        (
            r#"{"id": 2, "prompt": "a", "seed": 1, "temperature": -1}"#,
            "temperature",
        ),
        (
            r#"{"id": 2, "prompt": "a", "seed": 1, "top_p": 1.5}"#,
            "top_p",
        ),
        (r#"{"id": 2, "prompt": "", "seed": 1}"#, "empty prompt"),
        (
            r#"{"id": 2, "prompt": "a", "seed": 1, "max_tokens": 100001}"#,
            "limit of 100000",
        ),
    ] {
        let out = generate(dir.path(), &ck, &format!("{good}\n{line}\n"), &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{line}: {err}");
        assert!(
            err.contains("in.jsonl:2: ") && err.contains(expected),
            "{line}: {err}"
        );
        assert!(
            !dir.path().join("out.jsonl").exists(),
            "{line}: wrote output"
        );
    }
    for (checkpoint, expected) in [
        (dir.path().join("missing.safetensors"), "cannot load"),
        (fixture("mlp_portable_seed7_step6.safetensors"), "model"),
    ] {
        let out = generate(dir.path(), &checkpoint, good, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{err}");
        assert!(err.contains(expected), "{err}");
    }
}
