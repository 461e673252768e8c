//! GPU throughput of ditto's random kernels next to the device's own copy bandwidth.
//!
//! For rand / randn / dropout in f32 and f16 at 2^26 elements, prints the time per call
//! and the GB/s of *output* written, beside a device-to-device copy of the same output
//! size timed the same way (CUDA events around `ITERS` back-to-back calls after a
//! warm-up). A random kernel that writes at copy speed is as fast as it can be; the
//! ratio column shows how close each op gets. `benches/compare_torch.py` prints the same
//! table for PyTorch on the same GPU. The launcher rows time the kernels alone; the
//! rows marked "(public, in place)" time the public in-place ops (`uniform_`, `normal_`,
//! `dropout_into`) on a CUDA tensor, i.e. the kernel plus the pipeline's host work
//! (validation, the generator's reservation, the launch), like `torch`'s `uniform_`.
//!
//! Run: `cargo bench --bench gpu_bench` (or the binary from `scripts/gpu_bundle.sh`).
//! Without a GPU it prints `skipping: <reason>` and exits 0 (1 under `REQUIRE_GPU=1`).

use std::sync::Arc;

use cudarc::driver::{sys::CUevent_flags, CudaStream};
use ditto::kernels::{self, launch, Launch};
use ditto::rng_gen::{self, increment_for, Generator, Key, RandomOp};
use ditto::tensor_core::cuda::{self, CudaStorage};
use ditto::tensor_core::cudarc;
use ditto::tensor_core::{DType, Device, Tensor};

const N: usize = 1 << 26;
const WARMUP: usize = 3;
const ITERS: usize = 20;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Milliseconds per call of `f`, timed with CUDA events on `stream`.
fn time_ms(
    stream: &Arc<CudaStream>,
    mut f: impl FnMut(usize) -> BenchResult<()>,
) -> BenchResult<f64> {
    for i in 0..WARMUP {
        f(i)?;
    }
    let ctx = stream.context();
    let start = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let end = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    start.record(stream)?;
    for i in 0..ITERS {
        f(WARMUP + i)?;
    }
    end.record(stream)?;
    Ok(f64::from(start.elapsed_ms(&end)?) / ITERS as f64)
}

/// One table row.
struct Row {
    op: String,
    dtype: DType,
    ms: f64,
    bytes_out: usize,
    copy_gbs: f64,
}

impl Row {
    fn gbs(&self) -> f64 {
        self.bytes_out as f64 / (self.ms * 1e-3) / 1e9
    }
}

fn bench(ordinal: usize) -> BenchResult<Vec<Row>> {
    let stream = cuda::default_stream(ordinal)?;
    let mut rows = Vec::new();
    for dtype in [DType::F32, DType::F16] {
        let bytes = N * dtype.size_in_bytes();
        // Device-to-device copy of the same number of output bytes.
        let src = CudaStorage::alloc(ordinal, dtype, N)?;
        let mut dst = CudaStorage::alloc(ordinal, dtype, N)?;
        let copy_ms = time_ms(&stream, |_| {
            Ok(stream.memcpy_dtod(src.bytes(), dst.bytes_mut())?)
        })?;
        let copy_gbs = bytes as f64 / (copy_ms * 1e-3) / 1e9;
        let row = |op: &str, ms: f64, bytes_out: usize| Row {
            op: op.into(),
            dtype,
            ms,
            bytes_out,
            copy_gbs,
        };
        rows.push(row("copy (d2d)", copy_ms, bytes));

        let mut out = CudaStorage::alloc(ordinal, dtype, N)?;
        let offset = |op, i: usize| i as u64 * increment_for(op, dtype, N as u64);
        let ms = time_ms(&stream, |i| {
            let offset = offset(RandomOp::Uniform, i);
            Ok(launch::uniform(
                &mut out,
                1,
                offset,
                0.0,
                1.0,
                Launch::Auto,
            )?)
        })?;
        rows.push(row("rand", ms, bytes));
        let ms = time_ms(&stream, |i| {
            let offset = offset(RandomOp::Normal, i);
            Ok(launch::normal(&mut out, 1, offset, 0.0, 1.0, Launch::Auto)?)
        })?;
        rows.push(row("randn", ms, bytes));
        let (p, scale) = (0.1f32, 1.0 / (1.0 - 0.1f32));
        let mask_words = kernels::packed_mask_words(N as u64) as usize;
        let mut mask = CudaStorage::alloc(ordinal, DType::U32, mask_words)?;
        for with_mask in [false, true] {
            let ms = time_ms(&stream, |i| {
                let offset = offset(RandomOp::Dropout, i);
                let mask = with_mask.then_some(&mut mask);
                Ok(launch::dropout(
                    &src,
                    &mut out,
                    mask,
                    1,
                    offset,
                    p,
                    scale,
                    Launch::Auto,
                )?)
            })?;
            rows.push(if with_mask {
                row("dropout p=0.1 + 1-bit mask", ms, bytes + N / 8)
            } else {
                row("dropout p=0.1", ms, bytes)
            });
        }
        rows.extend(public_in_place_rows(ordinal, &stream, dtype, copy_gbs)?);
    }
    Ok(rows)
}

/// The public in-place ops on a CUDA tensor of `N` elements of `dtype`: what a user's
/// `x.uniform_()` costs, host work included.
fn public_in_place_rows(
    ordinal: usize,
    stream: &Arc<CudaStream>,
    dtype: DType,
    copy_gbs: f64,
) -> BenchResult<Vec<Row>> {
    let device = Device::Cuda(ordinal);
    let bytes = N * dtype.size_in_bytes();
    let g = Generator::from_key(device, Key::new(1));
    let x = Tensor::ones(&[N], dtype, device)?;
    let mut out = Tensor::zeros(&[N], dtype, device)?;
    let mut rows = Vec::new();
    let row = |op: &str, ms: f64, bytes_out: usize| Row {
        op: format!("{op} (public, in place)"),
        dtype,
        ms,
        bytes_out,
        copy_gbs,
    };
    let ms = time_ms(stream, |_| {
        Ok(rng_gen::uniform_(&mut out, 0.0, 1.0, Some(&g))?)
    })?;
    rows.push(row("uniform_", ms, bytes));
    let ms = time_ms(stream, |_| {
        Ok(rng_gen::normal_(&mut out, 0.0, 1.0, Some(&g))?)
    })?;
    rows.push(row("normal_", ms, bytes));
    let ms = time_ms(stream, |_| {
        rng_gen::dropout_into(&x, 0.1, true, &mut out, Some(&g), false)?;
        Ok(())
    })?;
    rows.push(row("dropout_into p=0.1", ms, bytes));
    let ms = time_ms(stream, |_| {
        rng_gen::dropout_into(&x, 0.1, true, &mut out, Some(&g), true)?;
        Ok(())
    })?;
    rows.push(row("dropout_into p=0.1 + 1-bit mask", ms, bytes + N / 8));
    Ok(rows)
}

fn main() {
    let ordinal = 0;
    let reason = if !cuda::is_available() {
        Some("no CUDA device".to_string())
    } else {
        kernels::nvrtc::ensure_available()
            .err()
            .map(|e| e.to_string())
    };
    if let Some(reason) = reason {
        println!("skipping: {reason}");
        let required = std::env::var("REQUIRE_GPU").as_deref() == Ok("1");
        std::process::exit(i32::from(required));
    }
    let name = cuda::context(ordinal)
        .ok()
        .and_then(|c| c.name().ok())
        .unwrap_or_default();
    match bench(ordinal) {
        Ok(rows) => {
            println!("ditto on {name}, {N} elements, mean of {ITERS} calls after {WARMUP} warm-up (CUDA events)\n");
            println!("| op | dtype | ms / call | output GB/s | % of d2d copy |");
            println!("|---|---|---:|---:|---:|");
            for r in rows {
                let gbs = r.gbs();
                println!(
                    "| {} | {} | {:.3} | {:.0} | {:.0}% |",
                    r.op,
                    r.dtype,
                    r.ms,
                    gbs,
                    100.0 * gbs / r.copy_gbs
                );
            }
        }
        Err(e) => {
            eprintln!("gpu_bench failed: {e}");
            std::process::exit(1);
        }
    }
}
