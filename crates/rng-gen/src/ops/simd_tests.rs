//! Every sampler's fast path against its scalar reference, bit for bit.
//!
//! The reference is the docs/contract.md §5 definition as the samplers state it: group
//! `g` gets words `g * words ..` straight from the one-counter engine ([`word_at`]) and
//! is filled by `fill_group`. The fast path is the CPU fill: batched Philox and the batch
//! body, compiled for each instruction set this CPU runs (AVX-512, AVX2, baseline), with
//! plain and with streaming stores, on 1 and 3 threads. Sizes cover empty outputs,
//! partial batches and chunks, odd normal counts; offsets wrap past 2^64 inside the first
//! batch and inside a later chunk.

use std::sync::atomic::AtomicU32;

use half::{bf16, f16};
use tensor_core::{DType, Device, Element};

use super::args::FloatParams;
use super::args::{MeanStd, UniformRange};
use super::bernoulli::samplers::Bernoulli;
use super::bits::samplers::bits;
use super::cpu_fill::{fill_with, CHUNK_WORDS};
use super::dropout::mask::{clear_tail, mask_len};
use super::dropout::samplers::{DropoutFloat, DropoutForward, MaskOut};
use super::normal::samplers::Normal;
use super::randint::samplers::randint;
use super::randperm::samplers::draws;
use super::sampler::Sampler;
use super::uniform::samplers::Uniform;
use crate::simd::SimdLevel;
use crate::stream::key::Key;
use crate::stream::philox::word_at;

/// Element counts: empty, tiny, around a batch (128 words), around a chunk, several
/// chunks with a tail.
fn sizes() -> Vec<usize> {
    vec![
        0,
        1,
        3,
        63,
        127,
        128,
        129,
        1000,
        CHUNK_WORDS - 1,
        CHUNK_WORDS + 5,
        3 * CHUNK_WORDS + 77,
    ]
}

/// Keys: offset 0, a small one, wrapping inside the first batch, wrapping in a later
/// chunk.
fn keys() -> [Key; 4] {
    let seed = 0x0123_4567_89AB_CDEF;
    [0, 5, u64::MAX - 3, u64::MAX - 5000].map(|offset| Key { seed, offset })
}

/// The bits of an element, comparable across every element type.
fn bits_of<T: Element>(v: T) -> u64 {
    v.to_f64().to_bits()
}

/// The scalar reference: `fill_group` on words from the one-counter engine.
fn reference<S: Sampler>(op: &S, n: usize, key: Key) -> Vec<S::Elem> {
    let layout = op.layout();
    let mut out = vec![S::Elem::from_f64(0.0); n];
    for (g, group) in out.chunks_mut(layout.elements).enumerate() {
        let words: Vec<u32> = (0..layout.words)
            .map(|j| word_at(key.seed, key.offset, (g * layout.words + j) as u64))
            .collect();
        op.fill_group(g as u64, &words, group);
    }
    out
}

/// Every level, both kinds of stores and 1 and 3 threads equal the reference.
fn check<S: Sampler>(what: &str, make: impl Fn(usize) -> S) {
    let pools: Vec<_> = [1, 3]
        .map(|t| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .unwrap()
        })
        .into();
    for n in sizes() {
        for key in keys() {
            let op = make(n);
            let expected: Vec<u64> = reference(&op, n, key).into_iter().map(bits_of).collect();
            for level in SimdLevel::available() {
                for streaming in [false, true] {
                    for pool in &pools {
                        let mut out = vec![S::Elem::from_f64(0.0); n];
                        // Floor 0: from two chunks up, the 3-thread pool runs them in parallel.
                        pool.install(|| fill_with(&op, &mut out, key, level, streaming, 0));
                        let got: Vec<u64> = out.into_iter().map(bits_of).collect();
                        let first_diff = got.iter().zip(&expected).position(|(a, b)| a != b);
                        assert_eq!(
                            first_diff,
                            None,
                            "{what}: n {n} key {key:?} {level:?} streaming {streaming} \
                             threads {}",
                            pool.current_num_threads()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn uniform_every_dtype() {
    for (low, high) in [(0.0, 1.0), (-3.5, 2.25)] {
        let range = UniformRange::checked("t", (low, high), DType::F64, Device::Cpu).unwrap();
        check("uniform f32", |_| Uniform::<f32>::new("t", range));
        check("uniform f16", |_| Uniform::<f16>::new("t", range));
        check("uniform bf16", |_| Uniform::<bf16>::new("t", range));
        check("uniform f64", |_| Uniform::<f64>::new("t", range));
    }
}

#[test]
fn normal_every_dtype() {
    for (mean, std) in [(0.0, 1.0), (2.5, 0.75)] {
        let params = MeanStd::checked("t", (mean, std), DType::F64, Device::Cpu).unwrap();
        check("normal f32", |_| Normal::<f32>::new("t", params));
        check("normal f16", |_| Normal::<f16>::new("t", params));
        check("normal bf16", |_| Normal::<bf16>::new("t", params));
        check("normal f64", |_| Normal::<f64>::new("t", params));
    }
}

#[test]
fn bernoulli_every_dtype() {
    for p in [0.0, 0.3, 1.0] {
        check("bernoulli f32", |_| Bernoulli::<f32>::new("t", p));
        check("bernoulli f64", |_| Bernoulli::<f64>::new("t", p));
        check("bernoulli f16", |_| Bernoulli::<f16>::new("t", p));
        check("bernoulli bf16", |_| Bernoulli::<bf16>::new("t", p));
        check("bernoulli u8", |_| Bernoulli::<u8>::new("t", p));
        check("bernoulli bool", |_| Bernoulli::<bool>::new("t", p));
    }
}

#[test]
fn bits_randint_and_shuffle_draws() {
    check("bits", |_| bits());
    check("randint", |_| randint(-7, 1007));
    check("randint full range", |_| randint(i64::MIN, u64::MAX));
    check("randperm draws", |n| draws(n as u64 + 1));
}

/// Inputs for dropout: finite values of both signs, zeros, and exact halves.
fn inputs<T: DropoutFloat>(n: usize) -> Vec<T> {
    (0..n)
        .map(|i| T::from_f64((i % 97) as f64 * 0.37 - 17.0))
        .collect()
}

fn dropout_check<T: DropoutFloat>(what: &str) {
    let x = inputs::<T>(3 * CHUNK_WORDS + 77);
    for p in [0.1f32, 0.5, 1.0] {
        let scale = if p == 1.0 { 0.0 } else { 1.0 / (1.0 - p) };
        fn forward<'a, T>(
            x: &'a [T],
            p: f32,
            scale: f32,
            mask: MaskOut<'a>,
        ) -> DropoutForward<'a, T> {
            DropoutForward {
                op: "t",
                x,
                #[cfg(feature = "cuda")]
                x_cuda: None,
                p,
                scale,
                mask,
            }
        }
        check(what, |n| forward(&x[..n], p, scale, MaskOut::None));
        // The mask: fast path (with the same outputs) against the reference's mask.
        for n in sizes() {
            for key in keys() {
                let reference_mask: Vec<AtomicU32> =
                    (0..mask_len(n)).map(|_| AtomicU32::new(0)).collect();
                reference(
                    &forward(&x[..n], p, scale, MaskOut::Cpu(&reference_mask)),
                    n,
                    key,
                );
                for level in SimdLevel::available() {
                    let mask: Vec<AtomicU32> =
                        (0..mask_len(n)).map(|_| AtomicU32::new(0)).collect();
                    let mut out = vec![T::zero(); n];
                    fill_with(
                        &forward(&x[..n], p, scale, MaskOut::Cpu(&mask)),
                        &mut out,
                        key,
                        level,
                        true,
                        0,
                    );
                    let mut got: Vec<u32> = mask.into_iter().map(AtomicU32::into_inner).collect();
                    let mut want: Vec<u32> = reference_mask
                        .iter()
                        .map(|w| w.load(std::sync::atomic::Ordering::Relaxed))
                        .collect();
                    clear_tail(&mut got, n);
                    clear_tail(&mut want, n);
                    assert_eq!(got, want, "{what} mask: n {n} key {key:?} {level:?}");
                }
            }
        }
    }
}

#[test]
fn dropout_every_dtype_with_and_without_mask() {
    dropout_check::<f32>("dropout f32");
    dropout_check::<f64>("dropout f64");
    dropout_check::<f16>("dropout f16");
    dropout_check::<bf16>("dropout bf16");
}

/// The pipeline's word counts for ditto's own samplers are the contract's
/// (`stream::increment`), for every op and dtype.
#[test]
fn built_in_layouts_consume_what_the_contract_says() {
    use crate::stream::increment::{words_for, RandomOp};
    let unit = UniformRange::checked("t", (0.0, 1.0), DType::F64, Device::Cpu).unwrap();
    let standard = MeanStd::checked("t", (0.0, 1.0), DType::F64, Device::Cpu).unwrap();
    for n in (0..70u64).chain([u64::MAX / 4, u64::MAX]) {
        let cases: [(u128, u128); 8] = [
            (
                Uniform::<f32>::new("t", unit).layout().words_for(n),
                words_for(RandomOp::Uniform, DType::F32, n),
            ),
            (
                Uniform::<f64>::new("t", unit).layout().words_for(n),
                words_for(RandomOp::Uniform, DType::F64, n),
            ),
            (
                Normal::<f16>::new("t", standard).layout().words_for(n),
                words_for(RandomOp::Normal, DType::F16, n),
            ),
            (
                Normal::<f64>::new("t", standard).layout().words_for(n),
                words_for(RandomOp::Normal, DType::F64, n),
            ),
            (
                Bernoulli::<bool>::new("t", 0.5).layout().words_for(n),
                words_for(RandomOp::Bernoulli, DType::Bool, n),
            ),
            (
                bits().layout().words_for(n),
                words_for(RandomOp::Bits, DType::U32, n),
            ),
            (
                randint(0, 1).layout().words_for(n),
                words_for(RandomOp::Randint, DType::I64, n),
            ),
            (
                draws(n).layout().words_for(n.saturating_sub(1)),
                words_for(RandomOp::Randperm, DType::I64, n),
            ),
        ];
        for (i, (ours, contract)) in cases.into_iter().enumerate() {
            assert_eq!(ours, contract, "case {i}, n {n}");
        }
    }
}
