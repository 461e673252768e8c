//! How many Philox blocks each of ditto's random ops consumes: the offset bookkeeping of
//! docs/contract.md §7, next to the stream it describes. The random-op pipeline
//! (`ops/pipeline.rs`) reserves `ceil(words / 4)` blocks for every op, on every device,
//! from the op's own word count; for ditto's built-in ops that count is the one stated
//! here (a test checks every built-in sampler against [`words_for`]).
//!
//! A generator holds `(seed, offset)`, where `offset` counts 128-bit Philox blocks already
//! used. Before an op runs, the host reserves `increment_for(op, dtype, n)` blocks: the
//! op reads words from `offset` on, and the generator moves past them. Because the
//! increment depends only on `(op, dtype, n)` and never on parameter values, the device
//! or the launch grid, the next op starts at the same place wherever this one ran.
//!
//! Worked example: `randn(5)` in f32 uses one word per element, in pairs, so an odd `n`
//! still consumes its last pair: 6 words, `ceil(6 / 4) = 2` blocks. A generator at
//! offset 10 runs the op on blocks 10 and 11 (words 0..5 are lanes 0..3 of block 10 and
//! lanes 0..1 of block 11; lanes 2..3 of block 11 are skipped) and moves to offset 12.
//! `dropout` of 5 elements with p = 0.0 or p = 0.9 alike uses 5 words: 2 blocks.

use tensor_core::DType;

/// ditto's built-in random ops, whose stream consumption the contract defines. A
/// downstream op states its own (`Sampler::layout`) and needs no entry here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RandomOp {
    /// Raw 32-bit words (`bits`): one word per element.
    Bits,
    /// `rand` / `uniform`: one word per element, two for f64.
    Uniform,
    /// `randn` / `normal`: elements come in pairs (Box-Muller); one word per element,
    /// two for f64, and an odd `n` still consumes its last pair.
    Normal,
    /// `bernoulli`: one word per element.
    Bernoulli,
    /// `dropout`: one word per element.
    Dropout,
    /// `randint`: two words per element.
    Randint,
    /// `randperm(n)`: `n - 1` draws of two words each (Fisher-Yates).
    Randperm,
}

/// Philox words per element of `op` in `dtype`.
#[must_use]
pub fn words_per_element(op: RandomOp, dtype: DType) -> u64 {
    match (op, dtype) {
        (RandomOp::Uniform, DType::F64) | (RandomOp::Normal, DType::F64) => 2,
        (RandomOp::Randint, _) | (RandomOp::Randperm, _) => 2,
        _ => 1,
    }
}

/// Philox words an op on `n` elements consumes, including the unused half of a normal
/// pair and the skipped first element of a permutation.
#[must_use]
pub fn words_for(op: RandomOp, dtype: DType, n: u64) -> u128 {
    let per = u128::from(words_per_element(op, dtype));
    let n = u128::from(n);
    match op {
        RandomOp::Normal => n.div_ceil(2) * 2 * per,
        RandomOp::Randperm => n.saturating_sub(1) * per,
        _ => n * per,
    }
}

/// Blocks to reserve for an op on `n` elements: `ceil(words / 4)`. Computed in 128-bit
/// arithmetic, so it cannot overflow for any `n` (the largest result is below 2^63).
#[must_use]
pub fn increment_for(op: RandomOp, dtype: DType, n: u64) -> u64 {
    words_for(op, dtype, n).div_ceil(4) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worked_examples() {
        assert_eq!(increment_for(RandomOp::Uniform, DType::F32, 10), 3);
        assert_eq!(increment_for(RandomOp::Normal, DType::F32, 5), 2);
        assert_eq!(increment_for(RandomOp::Normal, DType::F32, 8), 2);
        assert_eq!(increment_for(RandomOp::Normal, DType::F32, 9), 3);
        assert_eq!(increment_for(RandomOp::Normal, DType::F64, 2), 1);
        assert_eq!(increment_for(RandomOp::Normal, DType::F64, 3), 2);
        assert_eq!(increment_for(RandomOp::Uniform, DType::F64, 3), 2);
        assert_eq!(increment_for(RandomOp::Dropout, DType::F16, 5), 2);
        assert_eq!(increment_for(RandomOp::Randint, DType::I64, 3), 2);
        assert_eq!(increment_for(RandomOp::Randperm, DType::I64, 1), 0);
        assert_eq!(increment_for(RandomOp::Randperm, DType::I64, 5), 2);
        assert_eq!(increment_for(RandomOp::Uniform, DType::F32, 0), 0);
        assert_eq!(
            increment_for(RandomOp::Randint, DType::I64, u64::MAX),
            1 << 63
        );
    }
}
