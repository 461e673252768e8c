//! ditto's portable f32 `exp`, `log` and `tanh` (docs/contract.md §14): accuracy against
//! an f64 reference, and the CUDA header's twins (`crates/tensor-core/cuda/portable_math.cuh`,
//! compiled for the host) equal to the Rust routines bit for bit.
//!
//! `every_f32_input` walks all 2^32 bit patterns and is `#[ignore]`d (minutes even in
//! release); run it with
//! `cargo test --release -p ditto --test integration -- --ignored portable_math_exhaustive:: --nocapture`.
//! The default test walks every 509th pattern (about 8.4 million), all binades included.
//! Errors are in ulps of the f32 reference (the spacing of f32 numbers in its binade,
//! 2^-149 in the subnormals); the reference is f64 `exp` / `ln` (error ~2^-53).

use ditto::tensor_core::host_parity;
use ditto::tensor_core::portable::math::{exp, log, tanh};
use ditto::tensor_core::{Device, Tensor};
use rayon::prelude::*;

/// The error of `got` against the exact value `want`, in ulps of f32 at `want`; an
/// overflow that correct rounding also gives counts as 0.
fn ulps(got: f32, want: f64) -> f64 {
    if want.is_nan() {
        return if got.is_nan() { 0.0 } else { f64::INFINITY };
    }
    let max_rounds_to_inf = f64::from(f32::MAX) + 2f64.powi(103); // half an ulp above MAX
    if want.abs() >= max_rounds_to_inf || want.is_infinite() {
        return if got == want.signum() as f32 * f32::INFINITY {
            0.0
        } else {
            f64::INFINITY
        };
    }
    if got.is_infinite() || got.is_nan() {
        return f64::INFINITY;
    }
    let exponent = if want == 0.0 {
        -149
    } else {
        (want.abs().log2().floor() as i32).max(-126)
    };
    let ulp = 2f64.powi(exponent - 23).max(2f64.powi(-149));
    (f64::from(got) - want).abs() / ulp
}

/// Worst error of `exp` and `log` over the bit patterns `step * i`, checking the CUDA
/// twins on the same inputs.
fn sweep(step: u64) -> (f64, u32, f64, u32) {
    const CHUNK: u64 = 1 << 20;
    let patterns = (1u64 << 32).div_ceil(step);
    (0..patterns.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let xs: Vec<f32> = (c * CHUNK..((c + 1) * CHUNK).min(patterns))
                .map(|i| f32::from_bits((i * step) as u32))
                .collect();
            let tensor = Tensor::from_vec(xs.clone(), &[xs.len()], Device::Cpu).unwrap();
            let cuda_exp = host_parity::unary("portable_exp", &tensor, 0.0, 0.0).unwrap();
            let cuda_log = host_parity::unary("portable_log", &tensor, 0.0, 0.0).unwrap();
            let (cuda_exp, cuda_log) = (
                cuda_exp.to_vec::<f32>().unwrap(),
                cuda_log.to_vec::<f32>().unwrap(),
            );
            let mut worst = (0.0f64, 0u32, 0.0f64, 0u32);
            for (i, &x) in xs.iter().enumerate() {
                let (e, l) = (exp(x), log(x));
                assert!(
                    e.to_bits() == cuda_exp[i].to_bits() || (e.is_nan() && cuda_exp[i].is_nan()),
                    "exp({x:e} = {:#x}): Rust {e:e}, CUDA header {:e}",
                    x.to_bits(),
                    cuda_exp[i]
                );
                assert!(
                    l.to_bits() == cuda_log[i].to_bits() || (l.is_nan() && cuda_log[i].is_nan()),
                    "log({x:e}): Rust {l:e}, CUDA header {:e}",
                    cuda_log[i]
                );
                let want_exp = f64::from(x).exp();
                let want_log = if x < 0.0 { f64::NAN } else { f64::from(x).ln() };
                let (ee, le) = (ulps(e, want_exp), ulps(l, want_log));
                if ee > worst.0 {
                    worst.0 = ee;
                    worst.1 = x.to_bits();
                }
                if le > worst.2 {
                    worst.2 = le;
                    worst.3 = x.to_bits();
                }
            }
            worst
        })
        .reduce(
            || (0.0, 0, 0.0, 0),
            |a, b| {
                let e = if a.0 >= b.0 { (a.0, a.1) } else { (b.0, b.1) };
                let l = if a.2 >= b.2 { (a.2, a.3) } else { (b.2, b.3) };
                (e.0, e.1, l.0, l.1)
            },
        )
}

fn report(what: &str, worst: (f64, u32, f64, u32)) {
    let (e, ex, l, lx) = worst;
    println!(
        "{what}: exp max {e:.3} ulp at {:e} ({ex:#010x}); log max {l:.3} ulp at {:e} ({lx:#010x})",
        f32::from_bits(ex),
        f32::from_bits(lx)
    );
    assert!(e < 1.0, "exp: {e} ulp at {:e}", f32::from_bits(ex));
    assert!(l < 1.0, "log: {l} ulp at {:e}", f32::from_bits(lx));
}

#[test]
fn a_strided_sweep_is_within_one_ulp_and_the_cuda_twins_agree() {
    report("every 509th f32", sweep(509));
}

#[test]
#[ignore = "all 2^32 inputs: run in release with --ignored"]
fn every_f32_input() {
    report("every f32", sweep(1));
}

/// `tanh` (GELU's, issue 30): the CUDA header's twin equals the Rust routine on every
/// `step`-th bit pattern, and the worst error against f64 `tanh` in ulps, with its input.
fn tanh_sweep(step: u64) -> (f64, u32) {
    const CHUNK: u64 = 1 << 20;
    let patterns = (1u64 << 32).div_ceil(step);
    (0..patterns.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let xs: Vec<f32> = (c * CHUNK..((c + 1) * CHUNK).min(patterns))
                .map(|i| f32::from_bits((i * step) as u32))
                .collect();
            let cuda = host_parity::portable_tanh(&xs);
            let mut worst = (0.0f64, 0u32);
            for (&x, &twin) in xs.iter().zip(&cuda) {
                let t = tanh(x);
                assert!(
                    t.to_bits() == twin.to_bits() || (t.is_nan() && twin.is_nan()),
                    "tanh({x:e} = {:#x}): Rust {t:e}, CUDA header {twin:e}",
                    x.to_bits()
                );
                let error = ulps(t, f64::from(x).tanh());
                if error > worst.0 {
                    worst = (error, x.to_bits());
                }
            }
            worst
        })
        .reduce(|| (0.0, 0), |a, b| if a.0 >= b.0 { a } else { b })
}

fn report_tanh(what: &str, (worst, at): (f64, u32)) {
    println!(
        "{what}: tanh max {worst:.3} ulp at {:e} ({at:#010x})",
        f32::from_bits(at)
    );
    // fdlibm's tanhf is within about 2 ulp; ditto's promise is the same bits everywhere.
    assert!(worst < 2.5, "tanh: {worst} ulp at {:e}", f32::from_bits(at));
}

#[test]
fn tanh_on_a_strided_sweep_is_accurate_and_its_cuda_twin_agrees() {
    report_tanh("every 509th f32", tanh_sweep(509));
}

#[test]
#[ignore = "all 2^32 inputs: run in release with --ignored"]
fn tanh_on_every_f32_input() {
    report_tanh("every f32", tanh_sweep(1));
}
