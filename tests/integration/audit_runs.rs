//! The audit on whole training runs: a trace from one thread and worker count diffs
//! clean against the same run's trace from another; the planted arrival-order
//! `index_add` is named, with its sequence number and call site; `ditto-audit diff`
//! reports both through its exit status. The audit is process-wide, so the tests here
//! take turns.

use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use ditto::nn_mini::train::{Run, TrainConfig, Trainer, TrainingRun};
use ditto::nn_mini::{cross_entropy, Embedding, Linear, Module, Sequential, Sgd, SgdConfig};
use ditto::rng_gen::{self, Generator};
use ditto::tensor_core::audit::{self, diff};
use ditto::tensor_core::{Algorithm, Device, Tensor};

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on a pool of `threads` threads, recording a trace at `path` in which `f`'s
/// records form the stream `main` (as a program's main thread would).
fn record<R: Send>(path: &Path, threads: usize, f: impl FnOnce() -> R + Send) -> R {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    audit::start(path).unwrap();
    let result = pool.install(|| audit::stream(|| "main".into(), f));
    audit::stop().unwrap();
    result
}

fn read(path: &Path) -> diff::Trace {
    diff::Trace::read(path).unwrap()
}

/// `ditto-audit diff a b`: its exit code and output.
fn ditto_audit(a: &Path, b: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ditto-audit"))
        .arg("diff")
        .args([a, b])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code().unwrap(), text)
}

#[test]
fn a_trace_diffs_clean_against_another_thread_and_worker_count() {
    test_support::own_process!(a_trace_diffs_clean_against_another_thread_and_worker_count);
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let train = |workers: usize| {
        let config = TrainConfig {
            batch_size: 32,
            dataset_size: 200,
            layers: vec![16, 64, 4],
            num_workers: workers,
            ..TrainConfig::default()
        };
        let mut trainer = Trainer::new(config).unwrap();
        for _ in 0..8 {
            trainer.step().unwrap();
        }
        trainer.losses().to_vec()
    };
    let (a, b) = (dir.path().join("a.trace"), dir.path().join("b.trace"));
    let la = record(&a, 1, || train(0));
    let lb = record(&b, 2, || train(3));
    assert_eq!(la, lb);
    let (ta, tb) = (read(&a), read(&b));
    // Batches loaded on the main thread and on workers land in the same named streams.
    assert!(
        ta.streams.keys().any(|s| s.starts_with("loader/")),
        "{:?}",
        ta.streams.keys()
    );
    assert!(ta.len() > 100, "{} records", ta.len());
    let report = diff::diff(&ta, &tb);
    assert!(report.identical(), "{report}");
    assert_eq!(ditto_audit(&a, &b).0, 0);
}

/// A few steps of `Embedding -> Linear` whose embedding backward runs on `algorithm`.
fn embedding_steps(algorithm: Algorithm) -> Vec<f32> {
    let generator = Generator::new(Device::Cpu);
    generator.manual_seed(11);
    let embedding = Embedding::new(32, 64, &generator)
        .unwrap()
        .with_algorithm(algorithm);
    let mut model = Sequential::new()
        .push(embedding)
        .push(Linear::new(64, 5, &generator).unwrap());
    let mut sgd = Sgd::new(SgdConfig::new(0.5)).unwrap();
    let mut losses = Vec::new();
    for _ in 0..3 {
        let tokens = rng_gen::randint(0, 32, &[2048], Device::Cpu, Some(&generator)).unwrap();
        let classes: Vec<i64> = tokens
            .to_vec::<i64>()
            .unwrap()
            .iter()
            .map(|t| t % 5)
            .collect();
        let targets = Tensor::from_vec(classes, &[2048], Device::Cpu).unwrap();
        model.zero_grad();
        let logits = model.forward(&tokens, true).unwrap();
        let (loss, grad) = cross_entropy(&logits, &targets).unwrap();
        model.backward_params(&grad).unwrap();
        sgd.step(&mut model).unwrap();
        losses.push(loss.to_vec::<f32>().unwrap()[0]);
    }
    losses
}

#[test]
fn the_audit_names_the_planted_arrival_order_index_add() {
    test_support::own_process!(the_audit_names_the_planted_arrival_order_index_add);
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.trace"), dir.path().join("b.trace"));
    // The deterministic path: clean on 1 thread against 2.
    record(&a, 1, || embedding_steps(Algorithm::Deterministic));
    record(&b, 2, || embedding_steps(Algorithm::Deterministic));
    assert!(diff::diff(&read(&a), &read(&b)).identical());

    // The planted fast path on 2 threads: thread timing decides when a pair differs.
    for _ in 0..50 {
        record(&a, 2, || embedding_steps(Algorithm::Fast));
        record(&b, 2, || embedding_steps(Algorithm::Fast));
        let report = diff::diff(&read(&a), &read(&b));
        let Some(finding) = report.findings.first() else {
            continue;
        };
        assert_eq!(finding.kind, diff::Divergence::Output, "{report}");
        let record = finding.a.as_ref().unwrap();
        assert_eq!(record.op, "index_add");
        assert!(
            record
                .location
                .starts_with("crates/nn-mini/src/layers/embedding.rs:"),
            "{}",
            record.location
        );
        let (code, text) = ditto_audit(&a, &b);
        assert_eq!(code, 1);
        assert!(
            text.contains(&format!("index_add (seq {} of stream main)", record.seq)),
            "{text}"
        );
        assert!(text.contains(&record.location), "{text}");
        for hash in [&finding.a, &finding.b] {
            let out = hash.as_ref().unwrap().output.as_ref().unwrap();
            assert!(text.contains(&format!("{:016x}", out.hash)), "{text}");
        }
        return;
    }
    panic!("50 pairs of runs of the fast index_add on 2 threads never diverged");
}

#[test]
fn random_ops_record_their_reservation_and_the_diff_names_a_different_seed() {
    test_support::own_process!(
        random_ops_record_their_reservation_and_the_diff_names_a_different_seed
    );
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let run = |seed: u64| {
        let generator = Generator::new(Device::Cpu);
        generator.manual_seed(seed);
        let x = rng_gen::randn(
            &[1000],
            ditto::tensor_core::DType::F32,
            Device::Cpu,
            Some(&generator),
        )
        .unwrap();
        let (y, _state) = rng_gen::dropout(&x, 0.5, true, Some(&generator)).unwrap();
        let mut z = Tensor::zeros(&[10], ditto::tensor_core::DType::F32, Device::Cpu).unwrap();
        rng_gen::uniform_(&mut z, -1.0, 1.0, Some(&generator)).unwrap();
        (y, z)
    };
    let (a, b) = (dir.path().join("a.trace"), dir.path().join("b.trace"));
    record(&a, 1, || run(5));
    record(&b, 2, || run(5));
    let (ta, tb) = (read(&a), read(&b));
    assert!(diff::diff(&ta, &tb).identical());
    let main = &ta.streams["main"];
    let ops: Vec<&str> = main.iter().map(|r| r.op.as_str()).collect();
    assert_eq!(ops, ["randn", "dropout", "uniform_"], "{main:?}");
    // randn of 1000 f32: 250 blocks from offset 0; dropout reserves after it.
    let first = main[0].rng.unwrap();
    assert_eq!(
        (first.device, first.seed, first.offset, first.blocks),
        (Device::Cpu, 5, 0, 250)
    );
    let second = main[1].rng.unwrap();
    assert_eq!(second.offset, 250);
    assert_eq!(main[1].inputs.len(), 1, "dropout records its input");
    for r in main {
        assert!(
            r.location.starts_with("tests/integration/audit_runs.rs:"),
            "{}",
            r.location
        );
    }
    // Another seed: the first random op is named with both reservations.
    record(&b, 1, || run(6));
    let report = diff::diff(&ta, &read(&b));
    let finding = &report.findings[0];
    assert_eq!(finding.kind, diff::Divergence::Rng, "{report}");
    assert_eq!(finding.a.as_ref().unwrap().op, "randn");
    assert!(report.to_string().contains("seed 6"), "{report}");
}
