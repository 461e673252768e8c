//! The CPU samplers give the same bits whatever the number of threads
//! (docs/contract.md §1: "not the number of CPU threads").
//!
//! Each op runs inside explicit rayon pools of 1, 2 and 3 threads. That covers what
//! `RAYON_NUM_THREADS=1` vs `RAYON_NUM_THREADS=2` would test (the variable only sizes
//! rayon's global pool, and `install` runs the op in the given pool instead), without
//! needing a separate process per setting.

use crate::common;

use rng_gen::{bernoulli, dropout, dropout_with_mask, rand, randint, randn, randperm};
use tensor_core::{DType, Device, Tensor};

use common::{generator, values};
use test_support::on_threads;

const SEED: u64 = 0x5EED;
const BIG: usize = 10_000_000;

/// Runs `op` in pools of 1, 2 and 3 threads; returns the three results.
fn in_pools<R: Send>(op: impl Fn() -> R + Sync) -> Vec<R> {
    [1, 2, 3]
        .iter()
        .map(|&threads| on_threads(threads, &op))
        .collect()
}

fn assert_all_equal<T: PartialEq + std::fmt::Debug>(runs: &[Vec<T>], what: &str) {
    for (i, run) in runs.iter().enumerate().skip(1) {
        let first_diff = run.iter().zip(&runs[0]).position(|(a, b)| a != b);
        assert_eq!(
            first_diff, None,
            "{what}: run {i} differs from the 1-thread run"
        );
        assert_eq!(run.len(), runs[0].len());
    }
}

#[test]
fn randn_10m_is_thread_count_invariant() {
    let runs = in_pools(|| {
        let t = randn(&[BIG], DType::F32, Device::Cpu, Some(&generator(SEED, 7))).unwrap();
        values::<f32>(&t)
            .into_iter()
            .map(f32::to_bits)
            .collect::<Vec<_>>()
    });
    assert_all_equal(&runs, "randn f32");
}

#[test]
fn rand_10m_is_thread_count_invariant() {
    let runs = in_pools(|| {
        let t = rand(&[BIG], DType::F32, Device::Cpu, Some(&generator(SEED, 0))).unwrap();
        values::<f32>(&t)
            .into_iter()
            .map(f32::to_bits)
            .collect::<Vec<_>>()
    });
    assert_all_equal(&runs, "rand f32");
}

#[test]
fn dropout_10m_is_thread_count_invariant() {
    let x = Tensor::full(&[BIG], 1.5, DType::F32, Device::Cpu).unwrap();
    let runs = in_pools(|| {
        let (y, state) = dropout_with_mask(&x, 0.3, true, Some(&generator(SEED, 1))).unwrap();
        let mut out: Vec<u32> = values::<f32>(&y).into_iter().map(f32::to_bits).collect();
        out.extend(state.packed_mask.unwrap().words().unwrap());
        out
    });
    assert_all_equal(&runs, "dropout f32 + mask");
    let plain = dropout(&x, 0.3, true, Some(&generator(SEED, 1))).unwrap().0;
    let with_mask = &runs[0][..BIG];
    assert!(values::<f32>(&plain)
        .iter()
        .zip(with_mask)
        .all(|(a, &b)| a.to_bits() == b));
}

#[test]
fn other_ops_are_thread_count_invariant() {
    let n = 1_000_003;
    let runs =
        in_pools(|| values::<i64>(&randperm(n, Device::Cpu, Some(&generator(SEED, 2))).unwrap()));
    assert_all_equal(&runs, "randperm");
    let runs = in_pools(|| {
        values::<i64>(&randint(-7, 1000, &[n], Device::Cpu, Some(&generator(SEED, 3))).unwrap())
    });
    assert_all_equal(&runs, "randint");
    let runs = in_pools(|| {
        let t = randn(&[n], DType::F64, Device::Cpu, Some(&generator(SEED, 4))).unwrap();
        values::<f64>(&t)
            .into_iter()
            .map(f64::to_bits)
            .collect::<Vec<_>>()
    });
    assert_all_equal(&runs, "randn f64");
    let runs = in_pools(|| {
        values::<u8>(
            &bernoulli(
                &[n],
                0.25,
                DType::U8,
                Device::Cpu,
                Some(&generator(SEED, 5)),
            )
            .unwrap(),
        )
    });
    assert_all_equal(&runs, "bernoulli");
}
