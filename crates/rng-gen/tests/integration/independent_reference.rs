//! Every op against a second, deliberately naive implementation of docs/contract.md §5:
//! one `word_at` call per word, plain loops, conversions written out from the spec text
//! (only the contract's own `ln` / `sincospi` are shared). Sizes cross the samplers'
//! chunk boundary (16384 words) so the parallel path is checked too.

use crate::common;

use half::{bf16, f16};
use rng_gen::stream::f32math::{ln, sincospi};
use rng_gen::{
    bernoulli, dropout, dropout_backward, dropout_with_mask, normal, randint, randn, randperm,
    uniform,
};
use tensor_core::{DType, Device, Tensor};

use common::{generator, values, word};

const KEYS: [(u64, u64); 3] = [
    (42, 0),
    (0xDEAD_BEEF_0123_4567, 977),
    (u64::MAX, u64::MAX - 2),
];
const SIZES: [usize; 4] = [1, 7, 64, 2 * 16_384 + 7];

/// `(w & 0xFFFFFF) * 2^-24`, written out.
fn u24(w: u32) -> f32 {
    (w & 0x00FF_FFFF) as f32 / 16_777_216.0
}

fn u53(w0: u32, w1: u32) -> f64 {
    let x = (u64::from(w0) << 32) | u64::from(w1);
    (x & ((1 << 53) - 1)) as f64 / 9_007_199_254_740_992.0
}

/// Standard normal pair of the spec, from two words.
fn normal_pair(w0: u32, w1: u32) -> (f32, f32) {
    let v = |w: u32| w as f32 * (1.0 / 4_294_967_296.0) + (1.0 / 8_589_934_592.0);
    let r = (-2.0 * ln(v(w0))).sqrt();
    let (s, c) = sincospi(2.0 * v(w1));
    (r * c, r * s)
}

#[test]
fn uniform_all_dtypes() {
    for (seed, offset) in KEYS {
        for n in SIZES {
            let (low, high) = (-1.5f64, 2.25f64);
            let (l, h) = (low as f32, high as f32);
            let w = |i: u64| word(seed, offset, i);
            let run = |dtype| {
                uniform(
                    &[n],
                    low,
                    high,
                    dtype,
                    Device::Cpu,
                    Some(&generator(seed, offset)),
                )
                .unwrap()
            };
            let want32: Vec<f32> = (0..n as u64).map(|i| l + (h - l) * u24(w(i))).collect();
            assert_eq!(values::<f32>(&run(DType::F32)), want32, "f32 {seed} {n}");
            let want16: Vec<f16> = (0..n as u64)
                .map(|i| f16::from_f32(l + (h - l) * ((w(i) & 0x7FF) as f32 / 2048.0)))
                .collect();
            assert_eq!(values::<f16>(&run(DType::F16)), want16, "f16 {seed} {n}");
            let wantb: Vec<bf16> = (0..n as u64)
                .map(|i| bf16::from_f32(l + (h - l) * ((w(i) & 0xFF) as f32 / 256.0)))
                .collect();
            assert_eq!(values::<bf16>(&run(DType::BF16)), wantb, "bf16 {seed} {n}");
            let want64: Vec<f64> = (0..n as u64)
                .map(|i| low + (high - low) * u53(w(2 * i), w(2 * i + 1)))
                .collect();
            assert_eq!(values::<f64>(&run(DType::F64)), want64, "f64 {seed} {n}");
        }
    }
}

#[test]
fn normal_all_dtypes() {
    for (seed, offset) in KEYS {
        for n in SIZES {
            let (mean, std) = (0.5f64, 3.0f64);
            let w = |i: u64| word(seed, offset, i);
            let z32: Vec<f32> = (0..n as u64)
                .map(|i| {
                    let (a, b) = normal_pair(w(i / 2 * 2), w(i / 2 * 2 + 1));
                    let z = if i % 2 == 0 { a } else { b };
                    mean as f32 + std as f32 * z
                })
                .collect();
            let run = |dtype| {
                normal(
                    &[n],
                    mean,
                    std,
                    dtype,
                    Device::Cpu,
                    Some(&generator(seed, offset)),
                )
                .unwrap()
            };
            assert_eq!(values::<f32>(&run(DType::F32)), z32, "f32 {seed} {n}");
            let z16: Vec<f16> = z32.iter().map(|&z| f16::from_f32(z)).collect();
            assert_eq!(values::<f16>(&run(DType::F16)), z16, "f16 {seed} {n}");
            let zb: Vec<bf16> = z32.iter().map(|&z| bf16::from_f32(z)).collect();
            assert_eq!(values::<bf16>(&run(DType::BF16)), zb, "bf16 {seed} {n}");
            let z64: Vec<f64> = (0..n as u64)
                .map(|i| {
                    let m = i / 2;
                    let u1 = 1.0 - u53(w(4 * m), w(4 * m + 1));
                    let u2 = u53(w(4 * m + 2), w(4 * m + 3));
                    let r = (-2.0 * u1.ln()).sqrt();
                    let t = 2.0 * std::f64::consts::PI * u2;
                    mean + std * if i % 2 == 0 { r * t.cos() } else { r * t.sin() }
                })
                .collect();
            assert_eq!(values::<f64>(&run(DType::F64)), z64, "f64 {seed} {n}");
        }
    }
    // randn is normal(0, 1), and a shape is only a view of the flat stream.
    let a = randn(&[3, 5, 7], DType::F32, Device::Cpu, Some(&generator(5, 5))).unwrap();
    let b = normal(
        &[105],
        0.0,
        1.0,
        DType::F32,
        Device::Cpu,
        Some(&generator(5, 5)),
    )
    .unwrap();
    assert_eq!(a.dims(), &[3, 5, 7]);
    assert_eq!(values::<f32>(&a), values::<f32>(&b));
}

#[test]
fn bernoulli_all_dtypes() {
    for (seed, offset) in KEYS {
        for n in SIZES {
            let p = 0.3;
            let flips: Vec<bool> = (0..n as u64)
                .map(|i| u24(word(seed, offset, i)) < p as f32)
                .collect();
            let run = |dtype| {
                bernoulli(&[n], p, dtype, Device::Cpu, Some(&generator(seed, offset))).unwrap()
            };
            assert_eq!(values::<bool>(&run(DType::Bool)), flips);
            let as_u8: Vec<u8> = flips.iter().map(|&f| u8::from(f)).collect();
            assert_eq!(values::<u8>(&run(DType::U8)), as_u8);
            let as_f32: Vec<f32> = flips.iter().map(|&f| if f { 1.0 } else { 0.0 }).collect();
            assert_eq!(values::<f32>(&run(DType::F32)), as_f32);
            let as_f64: Vec<f64> = flips.iter().map(|&f| if f { 1.0 } else { 0.0 }).collect();
            assert_eq!(values::<f64>(&run(DType::F64)), as_f64);
            let as_bf16: Vec<bf16> = flips
                .iter()
                .map(|&f| bf16::from_f32(f32::from(u8::from(f))))
                .collect();
            assert_eq!(values::<bf16>(&run(DType::BF16)), as_bf16);
        }
    }
}

#[test]
fn randint_values() {
    for (seed, offset) in KEYS {
        for n in SIZES {
            for (low, high) in [(-3i64, 10i64), (0, 1), (i64::MIN, i64::MAX), (5, 1 << 40)] {
                let range = (i128::from(high) - i128::from(low)) as u128;
                let want: Vec<i64> = (0..n as u64)
                    .map(|i| {
                        let x = (u64::from(word(seed, offset, 2 * i)) << 32)
                            | u64::from(word(seed, offset, 2 * i + 1));
                        let j = (u128::from(x) * range) >> 64;
                        (i128::from(low) + j as i128) as i64
                    })
                    .collect();
                let got =
                    randint(low, high, &[n], Device::Cpu, Some(&generator(seed, offset))).unwrap();
                assert_eq!(got.dtype(), DType::I64);
                assert_eq!(values::<i64>(&got), want, "[{low}, {high}) n {n}");
            }
        }
    }
}

#[test]
fn randperm_is_the_spec_fisher_yates() {
    for (seed, offset) in KEYS {
        for n in [0usize, 1, 2, 7, 100, 2 * 16_384 + 7] {
            let mut want: Vec<i64> = (0..n as i64).collect();
            for i in (1..n).rev() {
                let k = (n - 1 - i) as u64;
                let x = (u64::from(word(seed, offset, 2 * k)) << 32)
                    | u64::from(word(seed, offset, 2 * k + 1));
                let j = ((u128::from(x) * (i as u128 + 1)) >> 64) as usize;
                want.swap(i, j);
            }
            let got = randperm(n, Device::Cpu, Some(&generator(seed, offset))).unwrap();
            assert_eq!(got.dims(), &[n]);
            assert_eq!(values::<i64>(&got), want, "n {n}");
        }
    }
}

#[test]
fn dropout_forward_and_backward() {
    for (seed, offset) in KEYS {
        for n in SIZES {
            for p in [0.2f64, 0.5, 0.9] {
                let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 3.0).collect();
                let scale = 1.0f32 / (1.0 - p as f32);
                let keep: Vec<bool> = (0..n as u64)
                    .map(|i| u24(word(seed, offset, i)) >= p as f32)
                    .collect();
                let want: Vec<f32> = x
                    .iter()
                    .zip(&keep)
                    .map(|(&v, &k)| if k { v * scale } else { 0.0 })
                    .collect();
                let xt = Tensor::from_vec(x.clone(), &[n], Device::Cpu).unwrap();
                let (y, state) = dropout(&xt, p, true, Some(&generator(seed, offset))).unwrap();
                assert_eq!(values::<f32>(&y), want, "p {p} n {n}");
                assert_eq!(state.scale, scale);
                assert_eq!(
                    (state.key.seed, state.key.offset, state.n),
                    (seed, offset, n as u64)
                );
                // Backward regenerates the same mask; with a saved mask it reads it.
                let grad = Tensor::from_vec(vec![2.0f32; n], &[n], Device::Cpu).unwrap();
                let want_grad: Vec<f32> = keep
                    .iter()
                    .map(|&k| if k { 2.0 * scale } else { 0.0 })
                    .collect();
                assert_eq!(
                    values::<f32>(&dropout_backward(&grad, &state).unwrap()),
                    want_grad
                );
                let (y2, masked) =
                    dropout_with_mask(&xt, p, true, Some(&generator(seed, offset))).unwrap();
                assert_eq!(values::<f32>(&y2), want);
                let mask = masked.packed_mask.as_ref().unwrap().words().unwrap();
                assert_eq!(mask.len(), n.div_ceil(32));
                for (i, &k) in keep.iter().enumerate() {
                    assert_eq!(mask[i / 32] >> (i % 32) & 1 == 1, k);
                }
                assert_eq!(
                    values::<f32>(&dropout_backward(&grad, &masked).unwrap()),
                    want_grad
                );
            }
        }
    }
}

#[test]
fn dropout_other_dtypes() {
    let (seed, offset, n, p) = (9u64, 4u64, 1000usize, 0.3f64);
    let scale = 1.0f32 / (1.0 - p as f32);
    let keep: Vec<bool> = (0..n as u64)
        .map(|i| u24(word(seed, offset, i)) >= p as f32)
        .collect();
    let x16: Vec<f16> = (0..n).map(|i| f16::from_f32(i as f32 / 7.0)).collect();
    let t = Tensor::from_vec(x16.clone(), &[10, 100], Device::Cpu).unwrap();
    let (y, _) = dropout(&t, p, true, Some(&generator(seed, offset))).unwrap();
    let want: Vec<f16> = x16
        .iter()
        .zip(&keep)
        .map(|(&v, &k)| {
            if k {
                f16::from_f32(v.to_f32() * scale)
            } else {
                f16::ZERO
            }
        })
        .collect();
    assert_eq!(y.dims(), &[10, 100]);
    assert_eq!(values::<f16>(&y), want);
    let x64: Vec<f64> = (0..n).map(|i| i as f64 / 7.0).collect();
    let t = Tensor::from_vec(x64.clone(), &[n], Device::Cpu).unwrap();
    let (y, _) = dropout(&t, p, true, Some(&generator(seed, offset))).unwrap();
    let want: Vec<f64> = x64
        .iter()
        .zip(&keep)
        .map(|(&v, &k)| if k { v * f64::from(scale) } else { 0.0 })
        .collect();
    assert_eq!(values::<f64>(&y), want);
    // A strided view is read in logical order.
    let m = Tensor::from_vec(
        (0..6).map(|i| i as f32).collect::<Vec<_>>(),
        &[2, 3],
        Device::Cpu,
    )
    .unwrap();
    let (yt, _) = dropout(&m.t().unwrap(), p, true, Some(&generator(seed, offset))).unwrap();
    let logical = [0.0f32, 3.0, 1.0, 4.0, 2.0, 5.0];
    let want: Vec<f32> = logical
        .iter()
        .zip(&keep)
        .map(|(&v, &k)| if k { v * scale } else { 0.0 })
        .collect();
    assert_eq!(values::<f32>(&yt), want);
}

#[test]
fn dropout_edge_probabilities_and_eval() {
    let x = Tensor::from_vec(vec![1.0f32, -2.0, 3.0, f32::NAN, 5.0], &[5], Device::Cpu).unwrap();
    let g = generator(1, 0);
    let (y, state) = dropout(&x, 1.0, true, Some(&g)).unwrap();
    assert_eq!(
        values::<f32>(&y),
        vec![0.0; 5],
        "p = 1 drops everything, NaN included"
    );
    assert_eq!(state.scale, 0.0);
    assert!(state.scale.is_finite());
    let grad = Tensor::from_vec(vec![1.0f32; 5], &[5], Device::Cpu).unwrap();
    assert_eq!(
        values::<f32>(&dropout_backward(&grad, &state).unwrap()),
        vec![0.0; 5]
    );
    for (p, train) in [(0.0, true), (0.5, false)] {
        let (y, state) = dropout(&x, p, train, Some(&g)).unwrap();
        let (got, want) = (values::<f32>(&y), values::<f32>(&x));
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "identity"
        );
        assert_eq!(
            values::<f32>(&dropout_backward(&grad, &state).unwrap()),
            vec![1.0; 5]
        );
    }
}
