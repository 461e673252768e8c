//! What portable arithmetic costs on a GPU (docs/contract.md §14, issue 19): ditto's
//! portable matmul kernel against cuBLAS SGEMM (the default path; its handle is in
//! pedantic math mode, so no TF32) at the demo MLP's shapes and at 1024, 2048 and 4096
//! squares. Issue 19's target: portable >= 0.5x cuBLAS at 4096^3 on an H100.
//!
//! Each row times `Tensor::matmul` on f32 CUDA tensors, output allocation included (it
//! comes from the caching allocator), with `use_portable_arithmetic` off and on. The two
//! paths alternate, `REPS` times; each timing is `calls` back-to-back matmuls between two
//! device synchronisations (enough calls for about a GFLOP, so launch and sync overhead do
//! not dominate the small shapes), and the medians are printed.
//!
//! Run: `cargo bench --bench gpu_portable_bench` or the binary from
//! `scripts/gpu_bundle.sh`. Without a GPU it prints `skipping: <reason>` and exits 0 (1
//! under `REQUIRE_GPU=1`). `DITTO_BENCH_SMOKE=1` runs only the small shapes, once each:
//! CI runs it that way on the CUDA stand-in (host-executed), to prove the binary works,
//! not to measure anything.

use std::time::Instant;

use ditto::tensor_core::cuda;
use ditto::tensor_core::{use_portable_arithmetic, Device, Tensor};

const REPS: usize = 9;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// (name, m, k, n, lhs read through a transposed view): the demo's forward products,
/// its weight-gradient product `grad^T * x`, and three squares.
const SHAPES: [(&str, usize, usize, usize, bool); 7] = [
    ("128x64x256", 128, 64, 256, false),
    ("128x256x256", 128, 256, 256, false),
    ("128x256x10", 128, 256, 10, false),
    ("256T128x256", 256, 128, 256, true),
    ("1024^3", 1024, 1024, 1024, false),
    ("2048^3", 2048, 2048, 2048, false),
    ("4096^3", 4096, 4096, 4096, false),
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn operand(rows: usize, cols: usize, salt: usize, device: Device) -> BenchResult<Tensor> {
    let values: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7919 + salt) % 1000) as f32 * 1e-3 - 0.5)
        .collect();
    Ok(Tensor::from_vec(values, &[rows, cols], Device::Cpu)?.to_device(device)?)
}

/// Milliseconds per matmul: `calls` back to back between two synchronisations.
fn time(ordinal: usize, calls: usize, a: &Tensor, b: &Tensor, portable: bool) -> BenchResult<f64> {
    use_portable_arithmetic(portable);
    cuda::synchronize(ordinal)?;
    let start = Instant::now();
    for _ in 0..calls {
        drop(a.matmul(b)?);
    }
    cuda::synchronize(ordinal)?;
    Ok(start.elapsed().as_secs_f64() * 1e3 / calls as f64)
}

fn bench(ordinal: usize, smoke: bool) -> BenchResult<()> {
    let gpu = Device::Cuda(ordinal);
    println!("GPU: {}", cuda::get_device_name(ordinal)?);
    println!("\n| shape (m x k x n) | cuBLAS ms | portable ms | cuBLAS TFLOP/s | portable TFLOP/s | portable / cuBLAS |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, m, k, n, transposed) in SHAPES {
        if smoke && m * k * n > 1 << 24 {
            continue;
        }
        let a = if transposed {
            operand(k, m, 1, gpu)?.t()?
        } else {
            operand(m, k, 1, gpu)?
        };
        let b = operand(k, n, 2, gpu)?;
        let flop = 2.0 * (m * k * n) as f64;
        let calls = if smoke {
            1
        } else {
            (1e9 / flop).clamp(1.0, 500.0) as usize
        };
        let reps = if smoke { 1 } else { REPS };
        // One warm-up each: kernel loading, the allocator's first blocks.
        time(ordinal, 1, &a, &b, false)?;
        time(ordinal, 1, &a, &b, true)?;
        let (mut blas, mut portable) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            blas.push(time(ordinal, calls, &a, &b, false)?);
            portable.push(time(ordinal, calls, &a, &b, true)?);
        }
        let (blas, portable) = (median(blas), median(portable));
        let tflops = |ms: f64| flop / (ms * 1e-3) / 1e12;
        println!(
            "| {name} | {blas:.4} | {portable:.4} | {:.2} | {:.2} | {:.2}x |",
            tflops(blas),
            tflops(portable),
            blas / portable
        );
    }
    use_portable_arithmetic(false);
    Ok(())
}

fn main() {
    let ordinal = 0;
    if !cuda::is_available() {
        println!("skipping: no CUDA device");
        let required = std::env::var("REQUIRE_GPU").as_deref() == Ok("1");
        std::process::exit(i32::from(required));
    }
    let smoke = std::env::var("DITTO_BENCH_SMOKE").as_deref() == Ok("1");
    if smoke {
        println!("smoke run (DITTO_BENCH_SMOKE=1): small shapes, one call each; not a measurement");
    }
    let reps = if smoke { 1 } else { REPS };
    println!(
        "portable matmul vs cuBLAS SGEMM (f32, no TF32): medians of {reps} alternating timings"
    );
    if let Err(e) = bench(ordinal, smoke) {
        eprintln!("gpu_portable_bench failed: {e}");
        std::process::exit(1);
    }
}
