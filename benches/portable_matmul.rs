//! Portable arithmetic's cost (docs/contract.md §14, issue 19): ditto's portable CPU
//! matmul against gemm at the demo MLP's shapes and at the 1024, 2048 and 4096 squares,
//! on 1 and 2 threads, and the demo's training step (`Trainer::step`) with the switch off
//! and on.
//!
//! * `matmul/<shape>/gemm/<t>t`: `Tensor::matmul` as it is by default, in a rayon pool
//!   of `t` threads. ditto cuts C into blocks fixed by the shape (one single-threaded
//!   gemm call each, `ops/matmul/gemm_blocks.rs`) and fans the blocks out over the pool; small
//!   products are one block, so `1t` and `2t` are the same call there.
//! * `matmul/<shape>/portable/<t>t`: the same call under `use_portable_arithmetic(true)`,
//!   in a rayon pool of `t` threads (the portable kernel splits C's tiles over threads).
//! * `demo_step/default`, `demo_step/portable`: one SGD step of the demo (batch 128,
//!   64-256-256-10, loader included) on one thread.
//!
//! Shapes are `m x k x n`: the demo's forward products (batch 128 by each layer), and the
//! backward's weight-gradient product `grad^T (out x 128) * x (128 x in)` read through a
//! transposed view; the same for the large MLP (784-1024-1024-10, batch 256). Each timed call goes through `pool.install` (about a microsecond).
//! Run: `cargo bench --bench portable_matmul`; results in `benches/RESULTS.md`.

use criterion::{criterion_group, criterion_main, Criterion};
use nn_mini::train::{Run, TrainConfig, Trainer};
use tensor_core::{use_portable_arithmetic, Device, Tensor};

/// (name, m, k, n, lhs transposed): the demo's products and the 1024, 2048 and 4096
/// squares (the large ones take seconds a call: filter them in or out by name, e.g.
/// `cargo bench --bench portable_matmul -- 128x` for the demo's shapes only).
const SHAPES: [(&str, usize, usize, usize, bool); 11] = [
    ("128x64x256", 128, 64, 256, false),
    ("128x256x256", 128, 256, 256, false),
    ("128x256x10", 128, 256, 10, false),
    ("256T128x256", 256, 128, 256, true),
    ("256x784x1024", 256, 784, 1024, false),
    ("256x1024x1024", 256, 1024, 1024, false),
    ("256x1024x10", 256, 1024, 10, false),
    ("1024T256x1024", 1024, 256, 1024, true),
    ("1024x1024x1024", 1024, 1024, 1024, false),
    ("2048x2048x2048", 2048, 2048, 2048, false),
    ("4096x4096x4096", 4096, 4096, 4096, false),
];

fn operand(rows: usize, cols: usize, salt: u32) -> Tensor {
    let values: Vec<f32> = (0..rows * cols)
        .map(|i| {
            ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(salt) >> 8) as f32 / 16_777_216.0
                - 0.5
        })
        .collect();
    Tensor::from_vec(values, &[rows, cols], Device::Cpu).unwrap()
}

fn matmul(c: &mut Criterion) {
    let pools: Vec<(usize, rayon::ThreadPool)> = [1, 2]
        .into_iter()
        .map(|t| {
            (
                t,
                rayon::ThreadPoolBuilder::new()
                    .num_threads(t)
                    .build()
                    .unwrap(),
            )
        })
        .collect();
    let mut group = c.benchmark_group("matmul");
    group.sample_size(10);
    for (name, m, k, n, transposed) in SHAPES {
        let a = if transposed {
            operand(k, m, 1).t().unwrap()
        } else {
            operand(m, k, 1)
        };
        let b = operand(k, n, 2);
        use_portable_arithmetic(false);
        for (threads, pool) in &pools {
            group.bench_function(format!("{name}/gemm/{threads}t"), |bench| {
                bench.iter(|| pool.install(|| a.matmul(&b).unwrap()));
            });
        }
        use_portable_arithmetic(true);
        for (threads, pool) in &pools {
            group.bench_function(format!("{name}/portable/{threads}t"), |bench| {
                bench.iter(|| pool.install(|| a.matmul(&b).unwrap()));
            });
        }
        use_portable_arithmetic(false);
    }
    group.finish();
}

fn demo_step(c: &mut Criterion) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let mut group = c.benchmark_group("demo_step");
    group.sample_size(20);
    for portable in [false, true] {
        use_portable_arithmetic(portable);
        let mut trainer = Trainer::new(TrainConfig {
            seed: 7,
            ..TrainConfig::default()
        })
        .unwrap();
        let name = if portable { "portable" } else { "default" };
        group.bench_function(name, |bench| {
            bench.iter(|| pool.install(|| trainer.step().unwrap()));
        });
    }
    use_portable_arithmetic(false);
    group.finish();
}

criterion_group!(benches, matmul, demo_step);
criterion_main!(benches);
