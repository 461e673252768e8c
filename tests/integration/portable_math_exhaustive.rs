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

use ::host_parity::tensor_ops as host_parity;
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

/// The largest error seen, in ulps, and the input (bit pattern) that gave it.
#[derive(Clone, Copy, Default)]
struct Worst {
    ulps: f64,
    at: u32,
}

impl Worst {
    fn note(&mut self, ulps: f64, x: f32) {
        if ulps > self.ulps {
            *self = Worst {
                ulps,
                at: x.to_bits(),
            };
        }
    }

    fn max(self, other: Worst) -> Worst {
        if self.ulps >= other.ulps {
            self
        } else {
            other
        }
    }

    fn input(self) -> f32 {
        f32::from_bits(self.at)
    }
}

/// Runs `check` over the bit patterns `step * i`, in chunks on rayon's threads; `check`
/// returns the worst error of each of `N` functions on its chunk, this the worst of all.
fn sweep_patterns<const N: usize>(
    step: u64,
    check: impl Fn(&[f32]) -> [Worst; N] + Sync,
) -> [Worst; N] {
    const CHUNK: u64 = 1 << 20;
    let patterns = (1u64 << 32).div_ceil(step);
    (0..patterns.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let xs: Vec<f32> = (c * CHUNK..((c + 1) * CHUNK).min(patterns))
                .map(|i| f32::from_bits((i * step) as u32))
                .collect();
            check(&xs)
        })
        .reduce(
            || [Worst::default(); N],
            |a, b| std::array::from_fn(|i| a[i].max(b[i])),
        )
}

/// Asserts that the Rust routine's result `rust` and its CUDA twin's are the same bits
/// (any NaN equals any NaN).
fn same_as_twin(what: &str, x: f32, rust: f32, twin: f32) {
    assert!(
        rust.to_bits() == twin.to_bits() || (rust.is_nan() && twin.is_nan()),
        "{what}({x:e} = {:#x}): Rust {rust:e}, CUDA header {twin:e}",
        x.to_bits()
    );
}

/// Worst error of `exp` and `log` over the bit patterns `step * i`, checking the CUDA
/// twins on the same inputs.
fn sweep(step: u64) -> [Worst; 2] {
    sweep_patterns(step, |xs| {
        let tensor = Tensor::from_vec(xs.to_vec(), &[xs.len()], Device::Cpu).unwrap();
        let twin = |name| {
            let out = host_parity::unary(name, &tensor, 0.0, 0.0).unwrap();
            out.to_vec::<f32>().unwrap()
        };
        let (cuda_exp, cuda_log) = (twin("portable_exp"), twin("portable_log"));
        let mut worst = [Worst::default(); 2];
        for (i, &x) in xs.iter().enumerate() {
            let (e, l) = (exp(x), log(x));
            same_as_twin("exp", x, e, cuda_exp[i]);
            same_as_twin("log", x, l, cuda_log[i]);
            let want_log = if x < 0.0 { f64::NAN } else { f64::from(x).ln() };
            worst[0].note(ulps(e, f64::from(x).exp()), x);
            worst[1].note(ulps(l, want_log), x);
        }
        worst
    })
}

fn report(what: &str, [e, l]: [Worst; 2]) {
    println!(
        "{what}: exp max {:.3} ulp at {:e} ({:#010x}); log max {:.3} ulp at {:e} ({:#010x})",
        e.ulps,
        e.input(),
        e.at,
        l.ulps,
        l.input(),
        l.at
    );
    assert!(e.ulps < 1.0, "exp: {} ulp at {:e}", e.ulps, e.input());
    assert!(l.ulps < 1.0, "log: {} ulp at {:e}", l.ulps, l.input());
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
fn tanh_sweep(step: u64) -> Worst {
    let [worst] = sweep_patterns(step, |xs| {
        let cuda = host_parity::portable_tanh(xs);
        let mut worst = Worst::default();
        for (&x, &twin) in xs.iter().zip(&cuda) {
            let t = tanh(x);
            same_as_twin("tanh", x, t, twin);
            worst.note(ulps(t, f64::from(x).tanh()), x);
        }
        [worst]
    });
    worst
}

fn report_tanh(what: &str, worst: Worst) {
    println!(
        "{what}: tanh max {:.3} ulp at {:e} ({:#010x})",
        worst.ulps,
        worst.input(),
        worst.at
    );
    // fdlibm's tanhf is within about 2 ulp; ditto's promise is the same bits everywhere.
    assert!(
        worst.ulps < 2.5,
        "tanh: {} ulp at {:e}",
        worst.ulps,
        worst.input()
    );
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
