//! From Philox words to numbers: the per-element conversions of docs/contract.md §5.
//!
//! Each function here is a pure function of its words, and `crates/kernels/cuda/ditto_math.cuh`
//! holds its twin. Samplers (CPU) and kernels (GPU) only decide *which* words an element
//! uses; *how* words become a value is decided here, once.

use std::ops::{Add, Mul, Sub};

use half::{bf16, f16};

use super::f32math::{ln, sincospi};
use super::half_float::{f32_to_bf16, f32_to_f16};

/// 2^-24: the spacing of f32 uniforms, whose 24 bits fill an f32 significand exactly.
const TWO_POW_MINUS_24: f32 = 1.0 / 16_777_216.0;
/// 2^-32 and 2^-33, used by the normal sampler's `v(w)`.
const TWO_POW_MINUS_32: f32 = 1.0 / 4_294_967_296.0;
const TWO_POW_MINUS_33: f32 = 1.0 / 8_589_934_592.0;

/// Uniform f32 in [0, 1): the low 24 bits, exactly representable, so every value is a
/// multiple of 2^-24 and 1.0 is impossible.
#[must_use]
#[inline]
pub fn uniform_f32(word: u32) -> f32 {
    (word & 0x00FF_FFFF) as f32 * TWO_POW_MINUS_24
}

/// Uniform f16 in [0, 1): the low 11 bits times 2^-11, exact in f16.
#[must_use]
#[inline]
pub fn uniform_f16(word: u32) -> f16 {
    f32_to_f16(uniform_f16_as_f32(word))
}

/// [`uniform_f16`] as the f32 it equals exactly (what the f16 samplers compute with).
#[must_use]
#[inline]
pub fn uniform_f16_as_f32(word: u32) -> f32 {
    (word & 0x7FF) as f32 * (1.0 / 2048.0)
}

/// Uniform bf16 in [0, 1): the low 8 bits times 2^-8, exact in bf16.
#[must_use]
#[inline]
pub fn uniform_bf16(word: u32) -> bf16 {
    f32_to_bf16(uniform_bf16_as_f32(word))
}

/// [`uniform_bf16`] as the f32 it equals exactly (what the bf16 samplers compute with).
#[must_use]
#[inline]
pub fn uniform_bf16_as_f32(word: u32) -> f32 {
    (word & 0xFF) as f32 * (1.0 / 256.0)
}

/// Uniform f64 in [0, 1) from two words: the low 53 bits of `w0 << 32 | w1`.
#[must_use]
#[inline]
pub fn uniform_f64(w0: u32, w1: u32) -> f64 {
    let x = u64::from(w0) << 32 | u64::from(w1);
    (x & ((1u64 << 53) - 1)) as f64 * (1.0 / 9_007_199_254_740_992.0)
}

/// `low + (high - low) * u` in f32: one multiply then one add, never fused.
#[must_use]
#[inline]
pub fn scale_uniform_f32(u: f32, low: f32, high: f32) -> f32 {
    scale_uniform(u, low, high)
}

/// `low + (high - low) * u` in f64, the f64 twin of [`scale_uniform_f32`].
#[must_use]
#[inline]
pub fn scale_uniform_f64(u: f64, low: f64, high: f64) -> f64 {
    scale_uniform(u, low, high)
}

/// `low + (high - low) * u` in `T`: a subtraction, one multiply, then one add, each
/// rounded (Rust never fuses them), the order docs/contract.md §5.2 fixes for f32 and
/// f64 alike.
#[inline(always)]
fn scale_uniform<T>(u: T, low: T, high: T) -> T
where
    T: Copy + Sub<Output = T> + Mul<Output = T> + Add<Output = T>,
{
    let span = high - low;
    let scaled = span * u;
    low + scaled
}

/// The normal sampler's open-closed uniform `v(w) = f32(w) * 2^-32 + 2^-33`, in (0, 1].
/// Never 0, so `ln` never sees 0; the u32 -> f32 conversion rounds to nearest even.
#[must_use]
#[inline]
pub fn open_uniform_f32(word: u32) -> f32 {
    word as f32 * TWO_POW_MINUS_32 + TWO_POW_MINUS_33
}

/// Box-Muller on one pair of words: two standard normals `(z_2m, z_2m+1)`.
#[must_use]
#[inline]
pub fn box_muller(w0: u32, w1: u32) -> (f32, f32) {
    let u1 = open_uniform_f32(w0);
    let u2 = open_uniform_f32(w1);
    let radius = (-2.0 * ln(u1)).sqrt();
    let (sin, cos) = sincospi(2.0 * u2);
    (radius * cos, radius * sin)
}

/// `mean + std * z`: multiply then add, never fused.
#[must_use]
#[inline]
pub fn scale_normal_f32(z: f32, mean: f32, std: f32) -> f32 {
    let scaled = std * z;
    mean + scaled
}

/// True with probability `p`: `u < p` with `u` the f32 uniform of `word`.
#[must_use]
#[inline]
pub fn bernoulli(word: u32, p: f32) -> bool {
    uniform_f32(word) < p
}

/// Dropout keeps an element iff `u >= p`; see docs/contract.md §5.7.
#[must_use]
#[inline]
pub fn dropout_keep(word: u32, p: f32) -> bool {
    uniform_f32(word) >= p
}

/// An integer in [0, range) from two words: the high 64 bits of the 128-bit product
/// `(w0 << 32 | w1) * range`. Fixed consumption (no rejection loop), bias below 2^-64 * range.
#[must_use]
#[inline]
pub fn below(w0: u32, w1: u32, range: u64) -> u64 {
    let x = u64::from(w0) << 32 | u64::from(w1);
    ((u128::from(x) * u128::from(range)) >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_edges() {
        assert_eq!(uniform_f32(0), 0.0);
        assert_eq!(uniform_f32(u32::MAX), 1.0 - TWO_POW_MINUS_24);
        assert_eq!(uniform_f16(u32::MAX).to_f32(), 1.0 - 1.0 / 2048.0);
        assert_eq!(uniform_bf16(u32::MAX).to_f32(), 1.0 - 1.0 / 256.0);
        assert_eq!(uniform_f64(u32::MAX, u32::MAX), 1.0 - f64::EPSILON / 2.0);
        assert_eq!(open_uniform_f32(0), TWO_POW_MINUS_33);
        assert_eq!(open_uniform_f32(u32::MAX), 1.0);
    }

    #[test]
    fn narrow_uniforms_are_exact_in_f32() {
        for word in [0, 1, 0x7FF, 0x800, 0xFF, 0x100, u32::MAX, 0x1234_5678] {
            assert_eq!(uniform_f16(word).to_f32(), uniform_f16_as_f32(word));
            assert_eq!(uniform_bf16(word).to_f32(), uniform_bf16_as_f32(word));
        }
    }

    #[test]
    fn below_spans_the_range() {
        assert_eq!(below(0, 0, 10), 0);
        assert_eq!(below(u32::MAX, u32::MAX, 10), 9);
        assert_eq!(below(0x8000_0000, 0, 10), 5);
        assert_eq!(below(u32::MAX, u32::MAX, 1), 0);
    }

    #[test]
    fn dropout_and_bernoulli_are_complements() {
        for word in [0u32, 1, 0x7F_FFFF, 0x80_0000, u32::MAX] {
            assert_ne!(bernoulli(word, 0.5), dropout_keep(word, 0.5));
        }
        assert!(!bernoulli(0, 0.0));
        assert!(dropout_keep(u32::MAX, 0.0));
        assert!(!dropout_keep(u32::MAX, 1.0));
    }
}
