//! ditto's own f32 `exp` and `log` for portable arithmetic (docs/contract.md §14),
//! built only from correctly rounded IEEE-754 operations (add, sub, mul, div) and bit
//! manipulation, so the same input gives the same bits on every CPU and GPU.
//!
//! `f32::exp` / `f32::ln` call the platform's libm, and CUDA's `expf` / `logf` are
//! libdevice's: each is accurate, but they disagree in the last bit on some inputs, so a
//! softmax computed with them differs between a CPU and a GPU. These follow fdlibm
//! (musl's `expf` / `logf`) step for step; the CUDA twin is
//! `crates/tensor-core/cuda/portable_math.cuh`, same constants spelled as the same bit
//! patterns, same order of operations, no fused multiply-add (kernels are compiled with
//! `--fmad=false`, and Rust never contracts `a * b + c`).
//!
//! Accuracy, measured exhaustively over all 2^32 f32 inputs against an f64 reference
//! (`tests/integration/portable_math_exhaustive.rs`, release mode, 2026-11-25 on the 2-core x86-64
//! development VM): `exp` at most 0.910 ulp, `log` at most 0.835 ulp, and the CUDA
//! header compiled for the host equal to these on every input.

// `tanh` (GELU's tanh approximation) and the `expm1` it is built on, in a file of their own.
pub use super::hyperbolic::{expm1, tanh};

/// ln(2) split for Cody-Waite reduction in `exp`: `EXP_LN2_HI` has trailing zero bits,
/// so `k * EXP_LN2_HI` is exact for every `|k| <= 150` that occurs.
const EXP_LN2_HI: f32 = f32::from_bits(0x3f31_7200); // 6.9314575195e-01
const EXP_LN2_LO: f32 = f32::from_bits(0x35bf_be8e); // 1.4286067653e-06
const INV_LN2: f32 = f32::from_bits(0x3fb8_aa3b); // 1.4426950216e+00
/// Minimax coefficients of `x * (exp(x) + 1) / (exp(x) - 1)` (fdlibm / musl `expf`).
const EXP_P1: f32 = f32::from_bits(0x3e2a_aa8f); // 1.6666625440e-01
const EXP_P2: f32 = f32::from_bits(0xbb35_5215); // -2.7667332906e-03

/// ln(2) split in two for `log` (fdlibm / musl `logf`, as rng-gen's `ln`).
const LOG_LN2_HI: f32 = f32::from_bits(0x3f31_7180); // 6.9313812256e-01
const LOG_LN2_LO: f32 = f32::from_bits(0x3717_f7d1); // 9.0580006145e-06
/// Minimax coefficients of `(ln(1+s) - ln(1-s)) / s` in `s^2`.
const LG1: f32 = f32::from_bits(0x3f2a_aaaa); // 0.66666662693
const LG2: f32 = f32::from_bits(0x3ecc_ce13); // 0.40000972152
const LG3: f32 = f32::from_bits(0x3e91_e9ee); // 0.28498786688
const LG4: f32 = f32::from_bits(0x3e78_9e26); // 0.24279078841

/// `2^k` for `-126 <= k <= 127`, from its bits.
fn pow2(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

/// `y * 2^k` for `y` in about `[0.7, 1.5]` and `-150 <= k <= 128`, rounded once: every
/// multiplication but the last is exact.
fn scale(y: f32, k: i32) -> f32 {
    if k > 127 {
        y * pow2(127) * pow2(k - 127)
    } else if k < -126 {
        // y * 2^-102 stays normal (exact); the second product rounds into the subnormals.
        (y * pow2(-102)) * pow2(k + 102)
    } else {
        y * pow2(k)
    }
}

/// `e^x`. `exp(NaN) = NaN`, `exp(+inf) = +inf`, `exp(-inf) = 0`; overflows to `+inf`
/// above 88.72284, underflows to 0 below -103.97208.
///
/// Exhaustively measured against an f64 reference: at most 0.910 ulp (at
/// x = -37.776226); see the module docs.
#[must_use]
pub fn exp(x: f32) -> f32 {
    let bits = x.to_bits();
    let negative = bits >> 31 != 0;
    let magnitude = bits & 0x7fff_ffff;
    if magnitude >= 0x42ae_ac50 {
        // |x| >= 87.33655, or NaN.
        if magnitude > 0x7f80_0000 {
            return x;
        }
        if magnitude >= 0x42b1_7218 && !negative {
            return f32::INFINITY; // x >= 88.72284
        }
        if negative && magnitude >= 0x42cf_f1b5 {
            return 0.0; // x <= -103.97208
        }
    }
    let (hi, lo, k);
    if magnitude > 0x3eb1_7218 {
        // |x| > ln(2) / 2: x = k ln2 + r with |r| <= ln(2) / 2.
        k = if magnitude > 0x3f85_1592 {
            // |x| > 1.5 ln(2): k = round(x / ln2) by truncating x / ln2 +- 1/2.
            let half = if negative { -0.5 } else { 0.5 };
            (INV_LN2 * x + half) as i32
        } else if negative {
            -1
        } else {
            1
        };
        let kf = k as f32;
        hi = x - kf * EXP_LN2_HI;
        lo = kf * EXP_LN2_LO;
    } else if magnitude > 0x3900_0000 {
        // 2^-13 < |x| <= ln(2) / 2: no reduction.
        k = 0;
        hi = x;
        lo = 0.0;
    } else {
        // |x| <= 2^-13: 1 + x is within half an ulp.
        return 1.0 + x;
    }
    let r = hi - lo;
    let rr = r * r;
    let c = r - rr * (EXP_P1 + rr * EXP_P2);
    let y = 1.0 + ((r * c / (2.0 - c) - lo) + hi);
    if k == 0 {
        y
    } else {
        scale(y, k)
    }
}

/// Natural logarithm. `log(0) = -inf`, `log(x < 0) = NaN`, `log(+inf) = +inf`,
/// `log(NaN) = NaN`.
///
/// Exhaustively measured against an f64 reference: at most 0.835 ulp (at x = 1.4054595);
/// see the module docs.
#[must_use]
pub fn log(x: f32) -> f32 {
    let bits = x.to_bits();
    if bits < 0x0080_0000 || bits >> 31 != 0 {
        if bits << 1 == 0 {
            return f32::NEG_INFINITY;
        }
        if bits >> 31 != 0 {
            return if x.is_nan() { x } else { f32::NAN };
        }
        // Subnormal: scale into the normal range (exact), remember the exponent.
        return log_reduced((x * 33_554_432.0).to_bits(), -25); // 2^25
    }
    if bits >= 0x7f80_0000 {
        return x;
    }
    log_reduced(bits, 0)
}

/// The logarithm of a positive f64 sum, as f32: `log(hi)` of its f32 rounding `hi`
/// plus the relative rest `(total - hi) / hi` (an exact subtraction and a correctly
/// rounded f64 division), so a sum near 1 keeps its small logarithm. This is
/// `log_softmax`'s `l` under portable arithmetic. Zero, infinite and NaN sums give
/// `log(hi)`.
#[must_use]
pub fn log_of_sum(total: f64) -> f32 {
    let hi = total as f32;
    if hi.is_nan() || hi <= 0.0 || hi == f32::INFINITY {
        return log(hi);
    }
    let rest = ((total - f64::from(hi)) / f64::from(hi)) as f32;
    log(hi) + rest
}

/// `ln(2^k * x)` for the bits of a positive normal `x`: fdlibm's `logf` body, stated
/// once for Rust. rng-gen's `ln` (the Box-Muller radius, docs/contract.md §6) calls it
/// too, so the normal sampler and portable arithmetic share one logarithm. Straight-line
/// code (no branches), so a loop over it vectorises.
#[must_use]
#[inline(always)]
pub fn log_reduced(bits: u32, k: i32) -> f32 {
    // x = 2^k * m with m in [sqrt(2)/2, sqrt(2)).
    let bits = bits.wrapping_add(0x3f80_0000 - 0x3f35_04f3);
    let k = k + (bits >> 23) as i32 - 0x7f;
    let m = f32::from_bits((bits & 0x007f_ffff) + 0x3f35_04f3);
    // ln(m) = ln(1+f), f = m - 1 (exact), via s = f / (2 + f): 2s + s R(s^2).
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (LG2 + w * LG4);
    let t2 = z * (LG1 + w * LG3);
    let r = t2 + t1;
    let half_f_squared = 0.5 * f * f;
    let dk = k as f32;
    let mut result = s * (half_f_squared + r);
    result += dk * LOG_LN2_LO;
    result -= half_f_squared;
    result += f;
    result + dk * LOG_LN2_HI
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_values() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-0.0), 1.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(89.0), f32::INFINITY);
        assert_eq!(exp(-104.0), 0.0);
        assert_eq!(exp(88.72283).to_bits(), 88.72283f32.exp().to_bits());
        assert!(exp(-103.9).to_bits() > 0 && exp(-103.9).to_bits() < 4);
        assert_eq!(log(1.0), 0.0);
        assert_eq!(log(0.0), f32::NEG_INFINITY);
        assert_eq!(log(-0.0), f32::NEG_INFINITY);
        assert!(log(-1.0).is_nan());
        assert!(log(f32::NAN).is_nan());
        assert_eq!(log(f32::INFINITY), f32::INFINITY);
        assert!((log(f32::from_bits(1)) - (-103.278_93)).abs() < 1e-4);
    }

    #[test]
    fn close_to_f64_on_a_sweep() {
        // x from -100 to 88.7 (e^88.72284 is the largest finite result).
        for i in 0..188_700u32 {
            let x = i as f32 / 1000.0 - 100.0;
            let want = f64::from(x).exp();
            let got = f64::from(exp(x));
            let tolerance = (1.2e-7 * want).max(1.5e-45); // one subnormal ulp
            assert!(
                (got - want).abs() <= tolerance,
                "exp({x}) = {got}, want {want}"
            );
            let y = i as f32 / 100.0 + 1e-3;
            let want = f64::from(y).ln();
            let got = f64::from(log(y));
            assert!(
                (got - want).abs() <= 1.2e-7 * want.abs().max(1e-30),
                "log({y})"
            );
            let total = 1.0 + f64::from(i) * 1e-12;
            let got = f64::from(log_of_sum(total));
            assert!(
                (got - total.ln()).abs() <= 2.5e-7 * total.ln().max(1e-30),
                "{total}"
            );
        }
    }
}
