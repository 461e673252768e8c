//! How far each op moves its generator (docs/contract.md §7, "Offsets"): worked
//! examples, agreement with `rng_gen::increment_for` (what every device reserves) over a
//! sweep of sizes, independence from parameter values, and consecutive ops starting
//! where the previous one ended.

use crate::common;

use rng_gen::increment_for;
use rng_gen::{
    bernoulli, bits, dropout, normal, rand, randint, randn, randperm, uniform, Generator, RandomOp,
};
use tensor_core::{DType, Device, Tensor};

use common::{generator, values, word};

/// Offset after running `op` on a fresh generator at offset 100.
fn advance(op: impl FnOnce(&Generator)) -> u64 {
    let g = generator(3, 100);
    op(&g);
    g.offset() - 100
}

#[test]
fn worked_examples() {
    let cpu = Device::Cpu;
    assert_eq!(
        advance(|g| drop(rand(&[10], DType::F32, cpu, Some(g)).unwrap())),
        3
    );
    assert_eq!(
        advance(|g| drop(rand(&[3], DType::F64, cpu, Some(g)).unwrap())),
        2
    );
    assert_eq!(
        advance(|g| drop(randn(&[5], DType::F32, cpu, Some(g)).unwrap())),
        2
    );
    assert_eq!(
        advance(|g| drop(randn(&[8], DType::F32, cpu, Some(g)).unwrap())),
        2
    );
    assert_eq!(
        advance(|g| drop(randn(&[9], DType::F16, cpu, Some(g)).unwrap())),
        3
    );
    assert_eq!(
        advance(|g| drop(randn(&[3], DType::F64, cpu, Some(g)).unwrap())),
        2
    );
    assert_eq!(advance(|g| drop(randperm(5, cpu, Some(g)).unwrap())), 2);
    assert_eq!(advance(|g| drop(randperm(1, cpu, Some(g)).unwrap())), 0);
    assert_eq!(advance(|g| drop(randperm(0, cpu, Some(g)).unwrap())), 0);
    assert_eq!(
        advance(|g| drop(randint(0, 5, &[3], cpu, Some(g)).unwrap())),
        2
    );
    assert_eq!(advance(|g| drop(bits(&[9], cpu, Some(g)).unwrap())), 3);
    assert_eq!(
        advance(|g| drop(bernoulli(&[5], 0.5, DType::Bool, cpu, Some(g)).unwrap())),
        2
    );
    assert_eq!(
        advance(|g| drop(rand(&[0, 4], DType::F32, cpu, Some(g)).unwrap())),
        0
    );
    assert_eq!(
        advance(|g| drop(rand(&[], DType::F32, cpu, Some(g)).unwrap())),
        1
    );
}

#[test]
fn parameters_do_not_change_consumption() {
    let cpu = Device::Cpu;
    let x = Tensor::from_vec(vec![1.0f32; 5], &[5], cpu).unwrap();
    let by_p: Vec<u64> = [0.0, 0.5, 1.0]
        .iter()
        .map(|&p| advance(|g| drop(dropout(&x, p, true, Some(g)).unwrap())))
        .collect();
    assert_eq!(by_p, vec![2, 2, 2], "dropout p = 0, 0.5, 1");
    assert_eq!(
        advance(|g| drop(dropout(&x, 0.5, false, Some(g)).unwrap())),
        0,
        "eval mode draws nothing"
    );
    let by_range: Vec<u64> = [(0.0, 1.0), (-1e6, 1e6)]
        .iter()
        .map(|&(l, h)| advance(|g| drop(uniform(&[7], l, h, DType::F32, cpu, Some(g)).unwrap())))
        .collect();
    assert_eq!(by_range, vec![2, 2]);
    let by_p: Vec<u64> = [0.0, 1.0]
        .iter()
        .map(|&p| advance(|g| drop(bernoulli(&[7], p, DType::F32, cpu, Some(g)).unwrap())))
        .collect();
    assert_eq!(by_p, vec![2, 2]);
    let by_range: Vec<u64> = [(0, 1), (i64::MIN, i64::MAX)]
        .iter()
        .map(|&(l, h)| advance(|g| drop(randint(l, h, &[7], cpu, Some(g)).unwrap())))
        .collect();
    assert_eq!(by_range, vec![4, 4]);
    assert_eq!(
        advance(|g| drop(normal(&[7], 5.0, 0.0, DType::F32, cpu, Some(g)).unwrap())),
        advance(|g| drop(randn(&[7], DType::F32, cpu, Some(g)).unwrap()))
    );
}

/// Every op, every dtype it supports, n = 0..70: the generator moves by exactly the
/// shared increment function's answer.
#[test]
fn ops_advance_by_increment_for() {
    let cpu = Device::Cpu;
    let floats = [DType::F32, DType::F64, DType::F16, DType::BF16];
    for n in 0..70usize {
        let inc = |op, dtype| increment_for(op, dtype, n as u64);
        for dtype in floats {
            assert_eq!(
                advance(|g| drop(rand(&[n], dtype, cpu, Some(g)).unwrap())),
                inc(RandomOp::Uniform, dtype)
            );
            assert_eq!(
                advance(|g| drop(randn(&[n], dtype, cpu, Some(g)).unwrap())),
                inc(RandomOp::Normal, dtype)
            );
            assert_eq!(
                advance(|g| drop(bernoulli(&[n], 0.5, dtype, cpu, Some(g)).unwrap())),
                inc(RandomOp::Bernoulli, dtype)
            );
            let x = Tensor::zeros(&[n], dtype, cpu).unwrap();
            assert_eq!(
                advance(|g| drop(dropout(&x, 0.5, true, Some(g)).unwrap())),
                inc(RandomOp::Dropout, dtype)
            );
        }
        assert_eq!(
            advance(|g| drop(bits(&[n], cpu, Some(g)).unwrap())),
            inc(RandomOp::Bits, DType::U32)
        );
        assert_eq!(
            advance(|g| drop(randint(0, 9, &[n], cpu, Some(g)).unwrap())),
            inc(RandomOp::Randint, DType::I64)
        );
        assert_eq!(
            advance(|g| drop(randperm(n, cpu, Some(g)).unwrap())),
            inc(RandomOp::Randperm, DType::I64)
        );
    }
}

#[test]
fn next_op_starts_at_the_next_unused_block() {
    let g = generator(11, 0);
    let first: Vec<u32> = values(&bits(&[3], Device::Cpu, Some(&g)).unwrap());
    let second: Vec<u32> = values(&bits(&[2], Device::Cpu, Some(&g)).unwrap());
    assert_eq!(first, (0..3).map(|w| word(11, 0, w)).collect::<Vec<_>>());
    // The fourth word of block 0 is skipped: the second op starts at block 1.
    assert_eq!(second, vec![word(11, 1, 0), word(11, 1, 1)]);
    assert_eq!(g.offset(), 2);
}

#[test]
fn offsets_wrap_around() {
    let g = generator(1, u64::MAX);
    let v: Vec<u32> = values(&bits(&[8], Device::Cpu, Some(&g)).unwrap());
    assert_eq!(g.offset(), 1);
    assert_eq!(v[4], word(1, 0, 0));
    let k = g.reserve_blocks(u64::MAX);
    assert_eq!((k.seed, k.offset, g.offset()), (1, 1, 0));
}
