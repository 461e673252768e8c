//! # generate: text from a trained GPT, one JSON line per request, the same text for a
//! request whatever else runs with it
//!
//! ```text
//! cargo run --release --example train_gpt -- --recipe shakespeare-char-cpu
//! echo '{"id": 1, "prompt": "ROMEO:", "seed": 7, "max_tokens": 200}' > in.jsonl
//! cargo run --release --example generate -- \
//!     --checkpoint out-shakespeare-char/best.safetensors --prompts in.jsonl --out out.jsonl
//! ```
//!
//! Each input line is a request: `id` (any JSON value, echoed back), `prompt`, `seed`,
//! and optionally `temperature` (default 1; 0 is greedy), `top_k`, `top_p`,
//! `max_tokens` (default 256) and `stop`. Each output line is `{"id": ..., "text":
//! ...}`, in input order, written as soon as it and every line before it are done
//! (bytes that are not UTF-8 become U+FFFD). `--batch-size` requests advance together;
//! a request's text is the same at any batch size, thread count, and (with
//! `--portable`) device: `nn_mini::gpt::generate_batch` says why.
//!
//! Exit status: 0 ok, 2 bad flags or a bad request line (named, before anything is
//! generated), 3 any other error (a missing checkpoint, one that is not a GPT's).

use std::collections::BTreeMap;
use std::error::Error;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use nn_mini::gpt::{generate_batch, GenerationRequest, Gpt, SamplingParams};
use nn_mini::Checkpoint;
use serde::Deserialize;
use tensor_core::Device;

/// The longest text a request may ask for.
const MAX_TOKENS: usize = 100_000;

/// Generate text from a GPT checkpoint for every request of a JSON-lines file.
#[derive(Parser, Debug)]
#[command(name = "generate")]
struct Args {
    /// A checkpoint written by train_gpt (any step, or best.safetensors)
    #[arg(long, value_name = "CK")]
    checkpoint: PathBuf,
    /// The requests, one JSON object per line
    #[arg(long, value_name = "IN.jsonl")]
    prompts: PathBuf,
    /// Where the texts go, one JSON object per line, in input order
    #[arg(long, value_name = "OUT.jsonl")]
    out: PathBuf,
    /// Requests in flight at once, 1..=4096 [default: 8]
    #[arg(long, value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u16).range(1..=4096))]
    batch_size: u16,
    /// cpu or cuda:N [default: cpu]
    #[arg(long, value_name = "DEVICE", default_value = "cpu")]
    device: Device,
    /// Portable arithmetic: the same text on the CPU and on every GPU
    #[arg(long)]
    portable: bool,
}

/// One input line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    id: serde_json::Value,
    prompt: String,
    seed: u64,
    temperature: Option<f64>,
    top_k: Option<usize>,
    top_p: Option<f64>,
    max_tokens: Option<usize>,
    stop: Option<String>,
}

/// A request line that cannot be used: its number and why.
#[derive(Debug, thiserror::Error)]
#[error("{path}:{line}: {reason}")]
struct BadLine {
    path: String,
    line: usize,
    reason: String,
}

/// Every request of `args.prompts`, checked, with its id.
fn read_requests(
    args: &Args,
) -> Result<Vec<(serde_json::Value, GenerationRequest)>, Box<dyn Error>> {
    let path = args.prompts.display().to_string();
    let file = File::open(&args.prompts).map_err(|e| format!("cannot read {path}: {e}"))?;
    let mut requests = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let bad = |reason: String| BadLine {
            path: path.clone(),
            line: i + 1,
            reason,
        };
        let line = line.map_err(|e| bad(e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        let l: Line =
            serde_json::from_str(&line).map_err(|e| bad(format!("not a request: {e}")))?;
        let max_tokens = l.max_tokens.unwrap_or(256);
        if max_tokens > MAX_TOKENS {
            return Err(bad(format!(
                "max_tokens {max_tokens} is above this command's limit of {MAX_TOKENS}"
            ))
            .into());
        }
        let request = GenerationRequest {
            prompt: l.prompt.into_bytes(),
            seed: l.seed,
            sampling: SamplingParams {
                temperature: l.temperature.unwrap_or(1.0),
                top_k: l.top_k,
                top_p: l.top_p,
            },
            max_tokens,
            stop: l.stop.map(String::into_bytes),
        };
        if request.prompt.is_empty() {
            return Err(bad("an empty prompt; expected at least one character".into()).into());
        }
        request
            .sampling
            .validate()
            .map_err(|e| bad(e.to_string()))?;
        requests.push((l.id, request));
    }
    Ok(requests)
}

fn run(args: &Args) -> Result<(), Box<dyn Error>> {
    let requests = read_requests(args)?;
    tensor_core::use_portable_arithmetic(args.portable);
    let ck = Checkpoint::load(&args.checkpoint)
        .map_err(|e| format!("cannot load {}: {e}", args.checkpoint.display()))?;
    let mut model = Gpt::from_checkpoint(&ck, args.device)?;
    let out =
        File::create(&args.out).map_err(|e| format!("cannot write {}: {e}", args.out.display()))?;
    let mut out = BufWriter::new(out);
    let (ids, requests): (Vec<_>, Vec<_>) = requests.into_iter().unzip();
    let total = ids.len();
    let (mut done, mut next) = (BTreeMap::new(), 0);
    generate_batch(
        &mut model,
        requests,
        usize::from(args.batch_size),
        |i, text| {
            done.insert(i, text);
            // Every finished line whose predecessors are all written goes out now.
            while let Some(text) = done.remove(&next) {
                let line =
                    serde_json::json!({"id": ids[next], "text": String::from_utf8_lossy(&text)});
                writeln!(out, "{line}")
                    .and_then(|()| out.flush())
                    .map_err(|e| nn_mini::NnError::Io {
                        context: format!("writing {}", args.out.display()),
                        source: e,
                    })?;
                next += 1;
                eprintln!("{next}/{total} requests written");
            }
            Ok(())
        },
    )?;
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(if e.is::<BadLine>() { 2 } else { 3 })
        }
    }
}
