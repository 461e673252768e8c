//! Finding the op that breaks reproducibility, with the audit.
//!
//! A tiny model (`Embedding` -> `Linear`, cross-entropy, SGD) trains a few steps twice
//! from the same seed on 2 threads. Its embedding backward is planted with the fast,
//! arrival-order `index_add` (`Algorithm::Fast` with `DeterministicMode::Off`): threads
//! add token gradients into shared rows in whatever order they get there, so the two
//! runs round differently. Each run records an audit trace; the diff of the two traces
//! names the op, its sequence number and its call site. Then the same training runs
//! under `DeterministicMode::Error`, where the planted fast path is a typed error, and
//! with the default algorithm, whose two traces diff clean.
//!
//! ```text
//! cargo run --release --example find_nondeterminism
//! ```
//!
//! The traces are left in `target/find_nondeterminism/` for `ditto-audit diff`.

use std::path::{Path, PathBuf};

use ditto::nn_mini::{cross_entropy, Embedding, Linear, Module, Sequential, Sgd, SgdConfig};
use ditto::prelude::*;
use ditto::rng_gen::{self, Generator};
use ditto::tensor_core::audit::{self, diff};
use ditto::tensor_core::{use_deterministic_algorithms, Algorithm, DeterministicMode};

const VOCAB: usize = 64;
const EMBEDDING_DIM: usize = 64;
const CLASSES: usize = 8;
/// Tokens per step: 4096 x 64 gradient values into 64 rows, enough for the fast path to
/// split the work between the 2 threads.
const BATCH: usize = 4096;
const STEPS: usize = 6;
/// Runs of the planted pair to try: thread timing decides whether a pair differs.
const ATTEMPTS: usize = 50;

type Error = Box<dyn std::error::Error>;

/// Trains `STEPS` steps from seed 7 with the embedding backward on `algorithm`, recording
/// an audit trace at `trace`. Returns the losses.
fn train(algorithm: Algorithm, trace: &Path) -> Result<Vec<f32>, Error> {
    audit::start(trace)?;
    let result = train_steps(algorithm);
    audit::stop()?;
    result
}

fn train_steps(algorithm: Algorithm) -> Result<Vec<f32>, Error> {
    let generator = Generator::new(Device::Cpu);
    generator.manual_seed(7);
    let embedding = Embedding::new(VOCAB, EMBEDDING_DIM, &generator)?.with_algorithm(algorithm);
    let mut model =
        Sequential::new()
            .push(embedding)
            .push(Linear::new(EMBEDDING_DIM, CLASSES, &generator)?);
    let mut sgd = Sgd::new(SgdConfig::new(0.5))?;
    let mut losses = Vec::new();
    for _ in 0..STEPS {
        let tokens = rng_gen::randint(0, VOCAB as i64, &[BATCH], Device::Cpu, Some(&generator))?;
        // The class is a fixed function of the token, so there is something to learn.
        let classes: Vec<i64> = tokens
            .to_vec::<i64>()?
            .iter()
            .map(|t| t % CLASSES as i64)
            .collect();
        let targets = Tensor::from_vec(classes, &[BATCH], Device::Cpu)?;
        model.zero_grad();
        let logits = model.forward(&tokens, true)?;
        let (loss, grad) = cross_entropy(&logits, &targets)?;
        model.backward_params(&grad)?;
        sgd.step(&mut model)?;
        losses.push(loss.to_vec::<f32>()?[0]);
    }
    Ok(losses)
}

fn main() -> Result<(), Error> {
    // The planted race needs 2 threads; the default pool would do on a 2-core machine,
    // this makes it so on any machine.
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build_global()?;
    let dir = PathBuf::from("target/find_nondeterminism");
    std::fs::create_dir_all(&dir)?;
    let (a, b) = (dir.join("a.trace"), dir.join("b.trace"));

    println!("1. Off mode, fast index_add in the embedding backward, 2 threads: train twice");
    use_deterministic_algorithms(DeterministicMode::Off);
    let mut found = None;
    for attempt in 1..=ATTEMPTS {
        let (la, lb) = (train(Algorithm::Fast, &a)?, train(Algorithm::Fast, &b)?);
        let report = diff::diff(&diff::Trace::read(&a)?, &diff::Trace::read(&b)?);
        if let Some(finding) = report.findings.first() {
            println!("   attempt {attempt}: losses {la:?}\n              vs {lb:?}");
            found = Some((finding.clone(), report));
            break;
        }
        println!("   attempt {attempt}: the two runs happened to agree; again");
    }
    let Some((finding, report)) = found else {
        return Err(format!(
            "{ATTEMPTS} pairs of runs agreed bit for bit: thread timing never reordered \
             the fast index_add (is rayon running one thread?)"
        )
        .into());
    };
    println!("\n   ditto-audit diff {} {}:", a.display(), b.display());
    for line in report.to_string().lines() {
        println!("   | {line}");
    }
    let record = finding.a.as_ref().ok_or("the finding has no record")?;
    println!(
        "\n   the audit names: op `{}`, sequence number {} (stream {}), call site {}",
        record.op, record.seq, record.stream, record.location
    );

    println!("\n2. Error mode: the same training asks for the fast index_add");
    use_deterministic_algorithms(DeterministicMode::Error);
    match train(Algorithm::Fast, &a) {
        Err(error) => println!("   refused with a typed error:\n   {error}"),
        Ok(_) => return Err("Error mode let the fast index_add run".into()),
    }

    println!("\n3. Error mode, the embedding on its default algorithm: train twice");
    let (la, lb) = (train(Algorithm::Auto, &a)?, train(Algorithm::Auto, &b)?);
    let report = diff::diff(&diff::Trace::read(&a)?, &diff::Trace::read(&b)?);
    print!("   losses {la:?}\n   ditto-audit diff: {report}");
    if !report.identical() || la != lb {
        return Err("the deterministic runs differ".into());
    }
    Ok(())
}
