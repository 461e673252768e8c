//! Accuracy of ditto's own f32 `ln` and `sincospi`, exhaustively, over every input the
//! normal sampler can give them (docs/contract.md §6): `ln(v)` and `sincospi(2 v)` for
//! every distinct `v = open_uniform_f32(w)`, `w` a u32.
//!
//! `v` depends on `w` only through `f32(w)` (round to nearest even), and the distinct
//! `f32(w)` are: the integers 0..2^24, then in each binade [2^e, 2^(e+1)) for
//! e = 24..31 the multiples of 2^(e-23), then 2^32: 2^24 + 2^26 + 1 = 83,886,081 inputs.
//!
//! References are f64: `ln` from the platform's f64 `ln` (error ~2^-53, negligible at
//! f32 precision); `sin(pi x)`, `cos(pi x)` with an exact reduction of `x` to a
//! quadrant and `t` in [-1/2, 1/2] before calling f64 `sin` / `cos` of `pi/2 * t`.
//! Errors are in ulps of the f32 reference (the spacing of f32 numbers in the
//! reference's binade). Targets: `ln` <= 1 ulp, `sincospi` <= 2 ulp.
//!
//! The same inputs also go through the CUDA header's `ln` / `sincospi` compiled for the
//! host (`host_parity::random` (the `host-parity` test crate)), which must agree with Rust bit for bit on all of them.

use std::f64::consts::FRAC_PI_2;

use host_parity::random as cuda;
use rayon::prelude::*;
use rng_gen::stream::convert::open_uniform_f32;
use rng_gen::stream::f32math::{ln, sincospi};

/// Inputs counted as described above.
const DISTINCT: u64 = (1 << 24) + (1 << 26) + 1;

/// The `i`-th distinct value of `f32(w)`, as a word that converts to it.
fn word(i: u64) -> u32 {
    if i < 1 << 24 {
        return i as u32;
    }
    let j = i - (1 << 24);
    if j == 1 << 26 {
        return u32::MAX; // rounds to 2^32
    }
    let (e, k) = (24 + j / (1 << 23), j % (1 << 23));
    ((1u64 << e) + (k << (e - 23))) as u32
}

/// One f32 ulp at the magnitude of `reference` (a normal f32-range value, not 0).
fn ulp_of(reference: f64) -> f64 {
    let e = ((reference.to_bits() >> 52) & 0x7FF) as i32 - 1023;
    f64::powi(2.0, e.max(-126) - 23)
}

/// Error of `got` against `reference` in f32 ulps; an exact zero must be hit exactly.
fn ulps(got: f32, reference: f64) -> f64 {
    if reference == 0.0 {
        return if got == 0.0 { 0.0 } else { f64::INFINITY };
    }
    (f64::from(got) - reference).abs() / ulp_of(reference)
}

/// `(sin(pi x), cos(pi x))` in f64 with an exact argument reduction.
fn sincospi_reference(x: f32) -> (f64, f64) {
    let r = 2.0 * f64::from(x); // exact
    let q = r.round_ties_even();
    let t = r - q; // exact, in [-1/2, 1/2]
    let (s, c) = (FRAC_PI_2 * t).sin_cos();
    match (q as i64).rem_euclid(4) {
        0 => (s, c),
        1 => (c, -s),
        2 => (-s, -c),
        _ => (-c, s),
    }
}

/// The worst error seen and the input where it happened.
#[derive(Clone, Copy, Debug, Default)]
struct Worst {
    ulps: f64,
    input: f32,
}

impl Worst {
    fn see(&mut self, ulps: f64, input: f32) {
        if ulps > self.ulps {
            *self = Worst { ulps, input };
        }
    }
    fn max(self, other: Worst) -> Worst {
        if other.ulps > self.ulps {
            other
        } else {
            self
        }
    }
}

/// Worst errors of one chunk of inputs: (ln, sin, cos), and the number of inputs where
/// the CUDA header's result differs from Rust's in any bit.
fn check_chunk(range: std::ops::Range<u64>) -> ([Worst; 3], u64) {
    let v: Vec<f32> = range.map(|i| open_uniform_f32(word(i))).collect();
    let x: Vec<f32> = v.iter().map(|&v| 2.0 * v).collect();
    let ln_cuda = cuda::ln_many(&v);
    let (sin_cuda, cos_cuda) = cuda::sincospi_many(&x);
    let mut worst = [Worst::default(); 3];
    let mut mismatches = 0;
    for i in 0..v.len() {
        let l = ln(v[i]);
        worst[0].see(ulps(l, f64::from(v[i]).ln()), v[i]);
        let (s, c) = sincospi(x[i]);
        let (rs, rc) = sincospi_reference(x[i]);
        worst[1].see(ulps(s, rs), x[i]);
        worst[2].see(ulps(c, rc), x[i]);
        let same = l.to_bits() == ln_cuda[i].to_bits()
            && s.to_bits() == sin_cuda[i].to_bits()
            && c.to_bits() == cos_cuda[i].to_bits();
        mismatches += u64::from(!same);
    }
    (worst, mismatches)
}

#[test]
fn enumeration_covers_every_distinct_input_once() {
    assert_eq!(word(0), 0);
    assert_eq!(word((1 << 24) - 1), (1 << 24) - 1);
    assert_eq!(word(1 << 24), 1 << 24);
    assert_eq!(word((1 << 24) + 1), (1 << 24) + 2);
    assert_eq!(word(DISTINCT - 2), 0xFFFF_FF00); // the largest f32 below 2^32
    assert_eq!(word(DISTINCT - 1) as f32, 4_294_967_296.0);
    // Strictly increasing as f32, so no value is visited twice.
    for i in (0..DISTINCT - 1)
        .step_by(9973)
        .chain([(1 << 24) - 1, DISTINCT - 2])
    {
        assert!((word(i) as f32) < (word(i + 1) as f32), "{i}");
    }
}

#[test]
fn ln_and_sincospi_are_accurate_on_every_normal_sampler_input() {
    const CHUNK: u64 = 1 << 18;
    let start = std::time::Instant::now();
    let (worst, mismatches) = (0..DISTINCT.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| check_chunk(c * CHUNK..((c + 1) * CHUNK).min(DISTINCT)))
        .reduce(
            || ([Worst::default(); 3], 0),
            |(a, m), (b, n)| ([a[0].max(b[0]), a[1].max(b[1]), a[2].max(b[2])], m + n),
        );
    println!(
        "{DISTINCT} inputs in {:.1} s: ln max {:.3} ulp (at v = {:e}), sincospi max sin {:.3} ulp \
         (at x = {:e}), cos {:.3} ulp (at x = {:e}); CUDA header mismatches: {mismatches}",
        start.elapsed().as_secs_f64(),
        worst[0].ulps,
        worst[0].input,
        worst[1].ulps,
        worst[1].input,
        worst[2].ulps,
        worst[2].input,
    );
    assert!(worst[0].ulps <= 1.0, "ln: {:?}", worst[0]);
    assert!(worst[1].ulps <= 2.0, "sin: {:?}", worst[1]);
    assert!(worst[2].ulps <= 2.0, "cos: {:?}", worst[2]);
    assert_eq!(
        mismatches, 0,
        "the CUDA header's ln / sincospi differ from Rust's"
    );
}
