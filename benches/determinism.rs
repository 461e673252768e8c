//! What determinism and the audit cost on the CPU, side by side in one run.
//!
//! * `index_add`: the arrival-order fast path against the deterministic path, at the
//!   shapes of an embedding backward (few targets, many source rows) and of a sparse
//!   update (many targets), on 1 and 2 threads. Issue 12's target: deterministic within
//!   1.5x of fast. The last column says which path `Algorithm::Auto` takes in `Off` mode.
//! * `scatter_add`: the deterministic path against a compare-and-swap arrival-order
//!   version (why the CPU offers no fast path for it).
//! * the audit: a disabled op's check (one relaxed atomic load) in ns per op, times the
//!   ops of one training step, against the step; and a step with the audit enabled
//!   (hashing every input and output, writing to `io::sink`).
//!
//! Calls alternate between the two paths compared; medians of `REPS` are printed with
//! the load average. Run: `cargo bench --bench determinism`.

use std::hint::black_box;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ditto::nn_mini::train::{Run, TrainConfig, Trainer};
use ditto::tensor_core::audit::{self, OpRecorder};
use ditto::tensor_core::determinism::paths::INDEX_ADD_CPU;
use ditto::tensor_core::ops::scatter_add_atomic_cpu;
use ditto::tensor_core::{Algorithm, DType, Device, Tensor};

const REPS: usize = 31;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median microseconds of `a` and of `b`, called alternately.
fn side_by_side(mut a: impl FnMut(), mut b: impl FnMut()) -> (f64, f64) {
    a();
    b();
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..REPS {
        let t = Instant::now();
        a();
        ta.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        b();
        tb.push(t.elapsed().as_secs_f64() * 1e6);
    }
    (median(ta), median(tb))
}

fn filled(dims: &[usize]) -> Tensor {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5)
        .collect();
    Tensor::from_vec(v, dims, Device::Cpu).unwrap()
}

fn ids(n: usize, size: usize) -> Vec<i64> {
    (0..n as i64)
        .map(|k| (k.wrapping_mul(0x9E37_79B9) >> 7).rem_euclid(size as i64))
        .collect()
}

fn index_add_table() {
    println!(
        "\n| index_add (f32) | threads | fast us | deterministic us | det / fast | Auto in Off |"
    );
    println!("|---|---|---|---|---|---|");
    for (rows, n, dim) in [
        (64, 100_000, 16),
        (1000, 32_768, 64),
        (32, 16_384, 64),
        (10_000, 16_384, 128),
    ] {
        let dst = Tensor::zeros(&[rows, dim], DType::F32, Device::Cpu).unwrap();
        let src = filled(&[n, dim]);
        let index = Tensor::from_vec(ids(n, rows), &[n], Device::Cpu).unwrap();
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let run = |a| {
                pool.install(|| black_box(dst.index_add_with(0, &index, &src, 1.0, a).unwrap()));
            };
            let (fast, det) =
                side_by_side(|| run(Algorithm::Fast), || run(Algorithm::Deterministic));
            let before = INDEX_ADD_CPU.fast_runs();
            run(Algorithm::Auto);
            let auto = if INDEX_ADD_CPU.fast_runs() > before {
                "fast"
            } else {
                "deterministic"
            };
            println!(
                "| {n} x {dim} into {rows} rows | {threads} | {fast:.0} | {det:.0} | {:.2}x | {auto} |",
                det / fast
            );
        }
    }
}

fn scatter_add_table() {
    println!("\n| scatter_add (f32) | compare-and-swap us | deterministic us | det / CAS |");
    println!("|---|---|---|---|");
    for (rows, cols, targets) in [(100_000, 16, 64), (20_000, 64, 5000)] {
        let dst = Tensor::zeros(&[targets, cols], DType::F32, Device::Cpu).unwrap();
        let src = filled(&[rows, cols]);
        let index =
            Tensor::from_vec(ids(rows * cols, targets), &[rows, cols], Device::Cpu).unwrap();
        let (cas, det) = side_by_side(
            || {
                black_box(scatter_add_atomic_cpu(&dst, 0, &index, &src).unwrap());
            },
            || {
                black_box(
                    dst.scatter_add_with(0, &index, &src, Algorithm::Deterministic)
                        .unwrap(),
                );
            },
        );
        println!(
            "| {rows} x {cols} into {targets} rows | {cas:.0} | {det:.0} | {:.2}x |",
            det / cas
        );
    }
}

/// A writer that counts lines and drops them.
#[derive(Clone, Default)]
struct CountLines(Arc<AtomicU64>);

impl Write for CountLines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let lines = buf.iter().filter(|&&b| b == b'\n').count() as u64;
        self.0.fetch_add(lines, Ordering::Relaxed);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn audit_table() {
    // The check a disabled audit adds to every op: begin + finish with no trace open.
    let t = Tensor::zeros(&[1], DType::F32, Device::Cpu).unwrap();
    let calls = 20_000_000u32;
    let mut per_op = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        for _ in 0..calls {
            OpRecorder::begin("bench", &[black_box(&t)]).finish(black_box(&t));
        }
        per_op.push(start.elapsed().as_secs_f64() * 1e9 / f64::from(calls));
    }
    let per_op = median(per_op);

    // Ops per step of the demo's training run, counted from an enabled trace.
    let mut trainer = Trainer::new(TrainConfig::default()).unwrap();
    trainer.step().unwrap();
    let counter = CountLines::default();
    audit::start_writer(Box::new(counter.clone())).unwrap();
    let steps = 10;
    for _ in 0..steps {
        trainer.step().unwrap();
    }
    audit::stop().unwrap();
    let ops_per_step = (counter.0.load(Ordering::Relaxed) - 2) as f64 / f64::from(steps);

    // Two copies of the run, so the two sides step the same model state in turn.
    let mut plain = Trainer::new(TrainConfig::default()).unwrap();
    for _ in 0..=steps {
        plain.step().unwrap();
    }
    let (off, on) = side_by_side(
        || {
            plain.step().unwrap();
        },
        || {
            audit::start_writer(Box::new(std::io::sink())).unwrap();
            trainer.step().unwrap();
            audit::stop().unwrap();
        },
    );
    let disabled = ops_per_step * per_op / 1e3;
    println!("\n| audit | value |\n|---|---|");
    println!("| disabled: cost per op (begin + finish, no trace open) | {per_op:.2} ns |");
    println!("| ops per training step (demo MLP, batch 128) | {ops_per_step:.0} |");
    println!("| training step, audit disabled (median) | {off:.0} us |");
    println!(
        "| disabled audit per step: ops x cost per op | {disabled:.3} us ({:.4} % of the step) |",
        100.0 * disabled / off
    );
    println!(
        "| training step, audit enabled (hashing, io::sink) | {on:.0} us ({:.2}x) |",
        on / off
    );
}

fn main() {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "determinism bench: {} CPU threads in the default pool; load average {}",
        rayon::current_num_threads(),
        load.trim()
    );
    index_add_table();
    scatter_add_table();
    audit_table();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("\nload average after: {}", load.trim());
}
