//! What determinism costs on a GPU: each op with a CUDA fast path (`atomicAdd` in
//! arrival order) timed against its deterministic path, at a few sizes. Issue 12 keeps
//! a fast path only where this shows it faster; `benches/RESULTS.md` records the numbers.
//!
//! * `index_add` (an embedding backward: `rows` targets of `dim` values, `tokens`
//!   source rows): `atomicAdd` per element vs owner-computes after a host counting sort.
//! * `sum` along the last dim / of everything: one-pass `atomicAdd` of f64 pieces vs the
//!   two-phase fixed-order kernel.
//!
//! Each call is timed whole, host work included (the deterministic paths sort on the
//! host; both paths copy the index to the host to check it), as wall-clock time with
//! the device synchronized after each call; fast and deterministic calls alternate and
//! the medians of `REPS` are printed. Run: `cargo bench --bench gpu_determinism_bench` or the
//! binary from `scripts/gpu_bundle.sh`. Without a GPU it prints `skipping: <reason>` and
//! exits 0 (1 under `REQUIRE_GPU=1`).

use std::time::Instant;

use ditto::tensor_core::cuda;
use ditto::tensor_core::{Algorithm, DType, Device, Tensor};

const REPS: usize = 15;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median milliseconds of `fast` and `det`, timed alternately after one warm-up each.
fn compare(
    ordinal: usize,
    fast: impl Fn() -> BenchResult<Tensor>,
    det: impl Fn() -> BenchResult<Tensor>,
) -> BenchResult<(f64, f64)> {
    let time = |f: &dyn Fn() -> BenchResult<Tensor>| -> BenchResult<f64> {
        cuda::synchronize(ordinal)?;
        let start = Instant::now();
        let out = f()?;
        cuda::synchronize(ordinal)?;
        drop(out);
        Ok(start.elapsed().as_secs_f64() * 1e3)
    };
    time(&fast)?;
    time(&det)?;
    let (mut tf, mut td) = (Vec::new(), Vec::new());
    for _ in 0..REPS {
        tf.push(time(&fast)?);
        td.push(time(&det)?);
    }
    Ok((median(tf), median(td)))
}

fn filled(dims: &[usize], device: Device) -> BenchResult<Tensor> {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5)
        .collect();
    Ok(Tensor::from_vec(v, dims, Device::Cpu)?.to_device(device)?)
}

fn row(op: &str, shape: &str, (fast, det): (f64, f64)) {
    println!(
        "| {op} | {shape} | {fast:.3} | {det:.3} | {:.2}x |",
        det / fast
    );
}

fn bench(ordinal: usize) -> BenchResult<()> {
    let gpu = Device::Cuda(ordinal);
    println!("GPU: {}", cuda::get_device_name(ordinal)?);
    println!("\n| op | shape | fast (atomic) ms | deterministic ms | det / fast |");
    println!("|---|---|---|---|---|");
    for (rows, dim, tokens) in [
        (1000, 128, 1 << 15),
        (32_000, 256, 1 << 16),
        (64, 64, 1 << 20),
        (50_000, 64, 1 << 18),
    ] {
        let dst = Tensor::zeros(&[rows, dim], DType::F32, gpu)?;
        let src = filled(&[tokens, dim], gpu)?;
        let ids: Vec<i64> = (0..tokens as i64)
            .map(|k| (k.wrapping_mul(0x9E37_79B9) >> 7).rem_euclid(rows as i64))
            .collect();
        let index = Tensor::from_vec(ids, &[tokens], Device::Cpu)?.to_device(gpu)?;
        let run = |a| -> BenchResult<Tensor> { Ok(dst.index_add_with(0, &index, &src, 1.0, a)?) };
        let times = compare(
            ordinal,
            || run(Algorithm::Fast),
            || run(Algorithm::Deterministic),
        )?;
        row(
            "index_add",
            &format!("{tokens} x {dim} into {rows} rows"),
            times,
        );
    }
    for (dims, dim) in [
        (vec![1usize << 20], None),
        (vec![1 << 26], None),
        (vec![64, 1 << 20], Some(1)),
        (vec![4096, 4096], Some(1)),
        (vec![16, 1 << 16], Some(1)),
    ] {
        let x = filled(&dims, gpu)?;
        let run = |a| -> BenchResult<Tensor> { Ok(x.sum_with(dim, false, a)?) };
        let times = compare(
            ordinal,
            || run(Algorithm::Fast),
            || run(Algorithm::Deterministic),
        )?;
        row("sum", &format!("{dims:?} dim {dim:?}"), times);
    }
    Ok(())
}

fn main() {
    let required = std::env::var("REQUIRE_GPU").as_deref() == Ok("1");
    if cuda::device_count() == 0 {
        println!("skipping: no CUDA device");
        std::process::exit(i32::from(required));
    }
    if let Err(e) = bench(0) {
        eprintln!("gpu_determinism_bench failed: {e}");
        std::process::exit(1);
    }
}
