//! Distribution checks over 10^6+ samples: the bits are right (other tests), and they
//! also look like the distributions they claim to be. Seeds are fixed, so these are
//! deterministic; thresholds are at p ~ 1e-4 or looser than 5 sigma, so a broken
//! sampler (wrong bits, wrong scale, off-by-one) fails them and a correct one never does.

use crate::common;

use half::{bf16, f16};
use rng_gen::{bernoulli, dropout, normal, rand, randint, randn, randperm, uniform};
use tensor_core::{DType, Device, Tensor};

use common::{generator, values};

const N: usize = 1 << 20;
const CPU: Device = Device::Cpu;

/// Kolmogorov-Smirnov distance of `samples` (any order) from U[0, 1).
fn ks_uniform(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    let n = samples.len() as f64;
    samples
        .iter()
        .enumerate()
        .map(|(i, &x)| ((i + 1) as f64 / n - x).max(x - i as f64 / n))
        .fold(0.0, f64::max)
}

fn assert_ks_uniform(samples: Vec<f64>, what: &str) {
    let n = samples.len() as f64;
    let d = ks_uniform(samples);
    assert!(
        d < 1.63 / n.sqrt(),
        "{what}: KS distance {d} >= {} (p < 0.01)",
        1.63 / n.sqrt()
    );
}

#[test]
fn uniform_passes_kolmogorov_smirnov() {
    let f32s: Vec<f64> =
        values::<f32>(&rand(&[N], DType::F32, CPU, Some(&generator(1, 0))).unwrap())
            .into_iter()
            .map(f64::from)
            .collect();
    assert!(f32s.iter().all(|&u| (0.0..1.0).contains(&u)));
    assert_ks_uniform(f32s, "rand f32");
    let f64s = values::<f64>(&rand(&[N], DType::F64, CPU, Some(&generator(2, 0))).unwrap());
    assert_ks_uniform(f64s, "rand f64");
    let scaled: Vec<f64> =
        values::<f32>(&uniform(&[N], -2.0, 6.0, DType::F32, CPU, Some(&generator(3, 0))).unwrap())
            .into_iter()
            .map(|v| (f64::from(v) + 2.0) / 8.0)
            .collect();
    assert_ks_uniform(scaled, "uniform(-2, 6) f32");
    // f16 has 2048 levels: KS against the discrete uniform's own steps is loose, so
    // check the level counts instead (chi-square, 2047 dof; 0.9999 quantile ~ 2242).
    let halfs = values::<f16>(&rand(&[N], DType::F16, CPU, Some(&generator(4, 0))).unwrap());
    let mut counts = vec![0f64; 2048];
    for h in halfs {
        counts[(h.to_f32() * 2048.0) as usize] += 1.0;
    }
    let expected = N as f64 / 2048.0;
    let chi2: f64 = counts
        .iter()
        .map(|c| (c - expected).powi(2) / expected)
        .sum();
    assert!(chi2 < 2242.0, "rand f16 level counts: chi-square {chi2}");
}

struct Moments {
    mean: f64,
    var: f64,
    kurtosis: f64,
    tail: [f64; 3],
}

fn moments(z: &[f64]) -> Moments {
    let n = z.len() as f64;
    let mean = z.iter().sum::<f64>() / n;
    let var = z.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    let kurtosis = z.iter().map(|v| (v - mean).powi(4)).sum::<f64>() / n / var.powi(2);
    let tail = [1.0, 2.0, 3.0].map(|t| {
        z.iter()
            .filter(|v| ((*v - mean) / var.sqrt()).abs() > t)
            .count() as f64
            / n
    });
    Moments {
        mean,
        var,
        kurtosis,
        tail,
    }
}

/// Standard-normal moments and tails within ~5 sigma of their sampling error.
fn assert_standard_normal(z: &[f64], what: &str) {
    let n = z.len() as f64;
    let m = moments(z);
    assert!(m.mean.abs() < 5.0 / n.sqrt(), "{what}: mean {}", m.mean);
    assert!(
        (m.var - 1.0).abs() < 5.0 * (2.0 / n).sqrt(),
        "{what}: variance {}",
        m.var
    );
    assert!(
        (m.kurtosis - 3.0).abs() < 5.0 * (24.0 / n).sqrt(),
        "{what}: kurtosis {}",
        m.kurtosis
    );
    for (tail, p) in m
        .tail
        .iter()
        .zip([0.317_310_5, 0.045_500_26, 0.002_699_796])
    {
        let sigma = (p * (1.0 - p) / n).sqrt();
        assert!(
            (tail - p).abs() < 5.0 * sigma,
            "{what}: tail fraction {tail}, expected {p}"
        );
    }
}

#[test]
fn normal_moments_and_tails() {
    let n = 2 * N + 1;
    let z: Vec<f64> = values::<f32>(&randn(&[n], DType::F32, CPU, Some(&generator(5, 0))).unwrap())
        .into_iter()
        .map(f64::from)
        .collect();
    assert_standard_normal(&z, "randn f32");
    let z = values::<f64>(&randn(&[n], DType::F64, CPU, Some(&generator(6, 0))).unwrap());
    assert_standard_normal(&z, "randn f64");
    let shifted: Vec<f64> =
        values::<f32>(&normal(&[n], 3.0, 2.0, DType::F32, CPU, Some(&generator(7, 0))).unwrap())
            .into_iter()
            .map(|v| (f64::from(v) - 3.0) / 2.0)
            .collect();
    assert_standard_normal(&shifted, "normal(3, 2) f32");
}

#[test]
fn half_precision_normals_are_rounded_f32_normals() {
    let f32s =
        values::<f32>(&normal(&[N], 1.0, 0.5, DType::F32, CPU, Some(&generator(8, 3))).unwrap());
    let f16s =
        values::<f16>(&normal(&[N], 1.0, 0.5, DType::F16, CPU, Some(&generator(8, 3))).unwrap());
    let bf16s =
        values::<bf16>(&normal(&[N], 1.0, 0.5, DType::BF16, CPU, Some(&generator(8, 3))).unwrap());
    for i in 0..N {
        assert_eq!(f16s[i], f16::from_f32(f32s[i]), "f16 element {i}");
        assert_eq!(bf16s[i], bf16::from_f32(f32s[i]), "bf16 element {i}");
    }
}

#[test]
fn bernoulli_rates() {
    for (seed, p) in [(9u64, 0.1f64), (10, 0.5), (11, 0.9), (12, 0.0), (13, 1.0)] {
        let ones =
            values::<u8>(&bernoulli(&[N], p, DType::U8, CPU, Some(&generator(seed, 0))).unwrap());
        let rate = ones.iter().map(|&v| f64::from(v)).sum::<f64>() / N as f64;
        let sigma = (p * (1.0 - p) / N as f64).sqrt();
        assert!(
            (rate - p).abs() <= 5.0 * sigma,
            "bernoulli({p}): rate {rate}"
        );
    }
}

#[test]
fn dropout_keeps_the_expected_fraction_and_mean() {
    let p = 0.3;
    let x = Tensor::full(&[N], 2.0, DType::F32, CPU).unwrap();
    let (y, _) = dropout(&x, p, true, Some(&generator(14, 0))).unwrap();
    let y = values::<f32>(&y);
    let kept = y.iter().filter(|&&v| v != 0.0).count() as f64 / N as f64;
    assert!(
        (kept - 0.7).abs() < 5.0 * (0.21 / N as f64).sqrt(),
        "kept fraction {kept}"
    );
    let mean = y.iter().map(|&v| f64::from(v)).sum::<f64>() / N as f64;
    assert!(
        (mean - 2.0).abs() < 0.01,
        "dropout must preserve the mean: {mean}"
    );
}

#[test]
fn randint_chi_square() {
    let v = values::<i64>(&randint(-5, 5, &[N], CPU, Some(&generator(15, 0))).unwrap());
    let mut counts = [0f64; 10];
    for x in v {
        assert!((-5..5).contains(&x));
        counts[(x + 5) as usize] += 1.0;
    }
    let expected = N as f64 / 10.0;
    let chi2: f64 = counts
        .iter()
        .map(|c| (c - expected).powi(2) / expected)
        .sum();
    assert!(chi2 < 33.72, "randint chi-square {chi2} (9 dof, p < 1e-4)");
    // The full i64 range is reachable at both ends' halves.
    let wide =
        values::<i64>(&randint(i64::MIN, i64::MAX, &[4096], CPU, Some(&generator(16, 0))).unwrap());
    assert!(wide.iter().any(|&x| x < i64::MIN / 2) && wide.iter().any(|&x| x > i64::MAX / 2));
}

#[test]
fn randperm_is_a_uniform_permutation() {
    let n = 100_000;
    let mut p = values::<i64>(&randperm(n, CPU, Some(&generator(17, 0))).unwrap());
    assert_ne!(p, (0..n as i64).collect::<Vec<_>>());
    p.sort_unstable();
    assert_eq!(p, (0..n as i64).collect::<Vec<_>>());
    // All 120 orders of 5 elements equally often (chi-square, 119 dof, p < 1e-4).
    let g = generator(18, 0);
    let draws = 24_000;
    let mut counts = std::collections::HashMap::new();
    for _ in 0..draws {
        let perm = values::<i64>(&randperm(5, CPU, Some(&g)).unwrap());
        *counts.entry(perm).or_insert(0f64) += 1.0;
    }
    assert_eq!(counts.len(), 120, "every permutation of 5 occurs");
    let expected = f64::from(draws) / 120.0;
    let chi2: f64 = counts
        .values()
        .map(|c| (c - expected).powi(2) / expected)
        .sum();
    assert!(chi2 < 185.0, "randperm(5) chi-square {chi2}");
}
