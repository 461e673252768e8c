//! ditto's own `ln` and `sincospi` for f32, built only from correctly rounded IEEE-754
//! operations (add, sub, mul, div, sqrt) and bit manipulation.
//!
//! Why not `f32::ln` / `sin` / `cos`? Those call the platform's math library (or CUDA's
//! `logf`), whose last-bit results differ between libraries, CPUs and GPU generations.
//! A normal sample computed with them would not be bit-identical on CPU and GPU. Every
//! step below is exactly rounded, so the same inputs give the same bits everywhere.
//! The CUDA twin is `crates/kernels/cuda/ditto_math.cuh`: same constants, same order of
//! operations, no fused multiply-add (kernels are compiled with `--fmad=false`, and Rust
//! never contracts `a * b + c`).
//!
//! Accuracy, checked exhaustively over every input the normal sampler can produce (about
//! 8 * 10^7 distinct f32 values in (0, 1]) against an f64 reference, see
//! `tests/integration/f32math_exhaustive.rs`: `ln` within 0.83 ulp, `sincospi` within 1.72 ulp.

/// Natural logarithm, within 1 ulp on positive normal and subnormal inputs.
///
/// `ln(0) = -inf`, `ln(x < 0) = NaN`, `ln(+inf) = +inf`, `ln(NaN) = NaN`.
#[must_use]
pub fn ln(x: f32) -> f32 {
    let bits = x.to_bits();
    if bits < 0x0080_0000 || bits >> 31 != 0 {
        if bits << 1 == 0 {
            return f32::NEG_INFINITY;
        }
        if bits >> 31 != 0 {
            return f32::NAN;
        }
        // Subnormal: scale into the normal range (exact), remember the exponent.
        return ln_reduced((x * 33_554_432.0).to_bits(), -25); // 2^25
    }
    if bits >= 0x7f80_0000 {
        return x;
    }
    ln_reduced(bits, 0)
}

/// [`ln`] of a positive, normal, finite `x`: what `ln` computes for it, without the
/// checks for the other cases, so a loop over such values vectorises (the normal
/// sampler's `v(w)` is always one, in `[2^-33, 1]`).
#[must_use]
#[inline(always)]
pub fn ln_positive_normal(x: f32) -> f32 {
    ln_reduced(x.to_bits(), 0)
}

/// `ln(2^k * x)` for the bits of a positive normal `x`: fdlibm's `logf` body, which
/// tensor-core's portable arithmetic uses too, so it is stated once, there.
#[inline(always)]
fn ln_reduced(bits: u32, k: i32) -> f32 {
    tensor_core::portable::math::log_reduced(bits, k)
}

/// Adding then subtracting 1.5 * 2^23 rounds an f32 of magnitude below 2^22 to the
/// nearest integer (ties to even) using only additions.
const ROUND_TO_INTEGER: f32 = 12_582_912.0;

/// Coefficients of `sin(pi/2 * t) / t` as a polynomial in `t^2`, `|t| <= 1/2`
/// (fitted for relative error; ditto's own, see `tests/integration/f32math_exhaustive.rs`).
const SIN_COEFFS: [f32; 4] = [
    f32::from_bits(0x3fc9_0fdb), //  1.5707964     (pi / 2)
    f32::from_bits(0xbf25_5ddd), // -0.64596349
    f32::from_bits(0x3da3_2f49), //  0.07968003
    f32::from_bits(0xbb96_c981), // -0.0046016579
];
/// Coefficients of `(cos(pi/2 * t) - 1) / t^2` as a polynomial in `t^2`, `|t| <= 1/2`.
const COS_COEFFS: [f32; 4] = [
    f32::from_bits(0xbf9d_e9e6), // -1.2337005     (-pi^2 / 8)
    f32::from_bits(0x3e81_e0f5), //  0.25366941
    f32::from_bits(0xbcaa_e5c4), // -0.020861514
    f32::from_bits(0x3a6d_afd4), //  0.00090670330
];

/// `(sin(pi * x), cos(pi * x))`, each within 2 ulp.
///
/// Multiplying by pi inside the function (rather than calling `sin(pi * x)`) keeps the
/// argument reduction exact: `2x` is split into an integer quadrant `q` and a remainder
/// `t` in `[-1/2, 1/2]` with no rounding, then two short polynomials give
/// `sin(pi/2 * t)` and `cos(pi/2 * t)`, and the quadrant rotates them.
#[must_use]
pub fn sincospi(x: f32) -> (f32, f32) {
    if !x.is_finite() {
        return (f32::NAN, f32::NAN);
    }
    sincospi_finite(x)
}

/// [`sincospi`] of a finite `x`, without the check: straight-line code whose quadrant
/// rotation is selects and sign flips, so a loop over values vectorises. The body of
/// `sincospi`, stated once.
#[must_use]
#[inline(always)]
pub fn sincospi_finite(x: f32) -> (f32, f32) {
    let r = x + x; // exact (finite x, no overflow below 2^127)
    let q = if r.abs() < 8_388_608.0 {
        (r + ROUND_TO_INTEGER) - ROUND_TO_INTEGER
    } else {
        r // |r| >= 2^23 is already an integer
    };
    let t = r - q; // exact: |t| <= 1/2

    // Quadrant q mod 4; beyond 2^30, r is a multiple of 4. (Selecting 0 first and then
    // converting without Rust's saturation keeps this a vector instruction.)
    let q_small = if q.abs() < 1_073_741_824.0 { q } else { 0.0 };
    // SAFETY: `q_small` is finite (x is finite, so r and q are finite or +-inf, and an
    // infinite q fails the test above), integer-valued and below 2^30 in magnitude, so it
    // fits an i32 exactly.
    let quadrant = unsafe { q_small.to_int_unchecked::<i32>() } as u32 & 3;

    let s = t * t;
    let mut sin_poly = SIN_COEFFS[3];
    sin_poly = sin_poly * s + SIN_COEFFS[2];
    sin_poly = sin_poly * s + SIN_COEFFS[1];
    sin_poly = sin_poly * s + SIN_COEFFS[0];
    let sin_t = t * sin_poly;
    let mut cos_poly = COS_COEFFS[3];
    cos_poly = cos_poly * s + COS_COEFFS[2];
    cos_poly = cos_poly * s + COS_COEFFS[1];
    cos_poly = cos_poly * s + COS_COEFFS[0];
    let cos_t = 1.0 + s * cos_poly;

    // Rotate by quadrant: q = 0 gives (sin_t, cos_t), 1 (cos_t, -sin_t), 2 (-sin_t,
    // -cos_t), 3 (-cos_t, sin_t). Odd quadrants swap; the sine is negative in quadrants
    // 2 and 3, the cosine in 1 and 2. Negation flips the sign bit, as `-x` does.
    let swap = quadrant & 1 != 0;
    let (sin, cos) = if swap { (cos_t, sin_t) } else { (sin_t, cos_t) };
    let sin_sign = (quadrant & 2) << 30;
    let cos_sign = ((quadrant + 1) & 2) << 30;
    (
        f32::from_bits(sin.to_bits() ^ sin_sign),
        f32::from_bits(cos.to_bits() ^ cos_sign),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coefficients_are_the_fitted_values() {
        // The hex values the fit produced; the CUDA header spells them the same way.
        assert_eq!(
            SIN_COEFFS.map(f32::to_bits),
            [0x3fc9_0fdb, 0xbf25_5ddd, 0x3da3_2f49, 0xbb96_c981]
        );
        // ln's constants live with its body in tensor-core's portable/math.rs.
    }

    #[test]
    fn special_values() {
        assert_eq!(ln(1.0), 0.0);
        assert_eq!(ln(0.0), f32::NEG_INFINITY);
        assert!(ln(-1.0).is_nan());
        assert!(ln(f32::NAN).is_nan());
        assert_eq!(ln(f32::INFINITY), f32::INFINITY);
        assert!((ln(f32::from_bits(1)) - (-103.278_93)).abs() < 1e-4);
        assert_eq!(sincospi(0.0), (0.0, 1.0));
        assert_eq!(sincospi(0.5), (1.0, 0.0));
        assert_eq!(sincospi(1.0).1, -1.0);
        assert_eq!(sincospi(2.0).1, 1.0);
        assert_eq!(sincospi(-0.5).0, -1.0);
        assert_eq!(sincospi(1e30), (0.0, 1.0));
        assert!(sincospi(f32::INFINITY).0.is_nan());
    }

    /// The select-based rotation equals the quadrant table it replaced, for every
    /// quadrant, both signs of zero and large arguments.
    #[test]
    fn rotation_matches_the_quadrant_table() {
        for i in -4000..4000 {
            for x in [i as f32 / 1000.0, i as f32 * 1e5, -(i as f32) / 1000.0] {
                let (s, c) = sincospi(x);
                let r = x + x;
                let q = if r.abs() < 8_388_608.0 {
                    (r + ROUND_TO_INTEGER) - ROUND_TO_INTEGER
                } else {
                    r
                };
                let quadrant = if q.abs() < 1_073_741_824.0 {
                    (q as i32) & 3
                } else {
                    0
                };
                // sin_t / cos_t: quadrant 0 of the remainder (t / 2 is exact).
                let t = r - q;
                let (sin_t, cos_t) = sincospi_finite(t / 2.0);
                let expected = match quadrant {
                    0 => (sin_t, cos_t),
                    1 => (cos_t, -sin_t),
                    2 => (-sin_t, -cos_t),
                    _ => (-cos_t, sin_t),
                };
                assert_eq!(
                    (s.to_bits(), c.to_bits()),
                    (expected.0.to_bits(), expected.1.to_bits()),
                    "x = {x}"
                );
            }
        }
    }

    #[test]
    fn agrees_with_f64_on_a_sweep() {
        for i in 1..100_000u32 {
            let x = i as f32 / 25_000.0 - 2.0;
            let (s, c) = sincospi(x);
            let angle = std::f64::consts::PI * f64::from(x);
            assert!((f64::from(s) - angle.sin()).abs() < 2.5e-7, "sin at {x}");
            assert!((f64::from(c) - angle.cos()).abs() < 2.5e-7, "cos at {x}");
            let y = i as f32 / 1000.0;
            assert!(
                (f64::from(ln(y)) - f64::from(y).ln()).abs()
                    <= 1e-6 * f64::from(y).ln().abs().max(1.0)
            );
        }
    }
}
