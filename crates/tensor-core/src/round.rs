//! Correctly rounded narrowing conversions.
//!
//! `half` converts f64 to f16/bf16 by first rounding to f32 (or by dropping the low 32
//! mantissa bits), which rounds twice and can land on the wrong side of a tie. ditto
//! promises round-to-nearest-even for every float conversion, so the wide value is first
//! narrowed with *round to odd* and only then rounded to nearest even: rounding to odd
//! with at least two more bits than the final format makes the second rounding exact
//! (Boldo & Melquiond, "When double rounding is odd", 2005).

/// Rounds `v` to f32 with round-to-odd: the result is `v` when representable, otherwise
/// the neighbour of `v` toward zero or away from zero whose last mantissa bit is 1.
#[must_use]
pub(crate) fn f64_to_f32_round_to_odd(v: f64) -> f32 {
    let nearest = v as f32;
    if !nearest.is_finite() || f64::from(nearest) == v {
        // Exact, NaN, or beyond f32's range (where every narrower format overflows too).
        return nearest;
    }
    // The neighbour toward zero: `nearest` itself unless it rounded away from zero.
    let toward_zero = if f64::from(nearest).abs() > v.abs() {
        f32::from_bits(nearest.to_bits() - 1)
    } else {
        nearest
    };
    f32::from_bits(toward_zero.to_bits() | 1)
}

/// Converts an i64 to f64 with round-to-odd (exact for `|v| <= 2^53`), so that a second
/// rounding to f32 / f16 / bf16 is correct.
#[must_use]
pub(crate) fn i64_to_f64_round_to_odd(v: i64) -> f64 {
    let magnitude = v.unsigned_abs();
    let bits = 64 - magnitude.leading_zeros();
    if bits <= 53 {
        return v as f64;
    }
    let shift = bits - 53;
    let mut kept = magnitude >> shift;
    if magnitude & ((1u64 << shift) - 1) != 0 {
        kept |= 1;
    }
    // `kept` has 53 significant bits, so both conversions below are exact.
    let value = kept as f64 * f64::from(shift).exp2();
    if v < 0 {
        -value
    } else {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn f64_to_f16_breaks_ties_by_the_low_bits() {
        // 1 + 2^-11 is the tie between 1 and 1 + 2^-10; anything above must round up.
        let just_above_tie = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        let via_odd = f16::from_f32(f64_to_f32_round_to_odd(just_above_tie));
        assert_eq!(via_odd, f16::from_f64(1.0 + 2f64.powi(-10)));
        let exact_tie = 1.0 + 2f64.powi(-11);
        assert_eq!(f16::from_f32(f64_to_f32_round_to_odd(exact_tie)), f16::ONE);
        let just_above = 1.0 + 2f64.powi(-8) + 2f64.powi(-45);
        assert_eq!(
            bf16::from_f32(f64_to_f32_round_to_odd(just_above)).to_f64(),
            1.0 + 2f64.powi(-7)
        );
    }

    #[test]
    fn round_to_odd_keeps_exact_and_special_values() {
        for v in [
            0.0,
            -0.0,
            1.5,
            -3.25,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e300,
        ] {
            let r = f64_to_f32_round_to_odd(v);
            assert_eq!(r.to_bits(), (v as f32).to_bits(), "{v}");
        }
        assert!(f64_to_f32_round_to_odd(f64::NAN).is_nan());
        let r = f64_to_f32_round_to_odd(-(1.0 + 2f64.powi(-30)));
        assert_eq!(r.to_bits() & 1, 1);
        assert!(r < -1.0 && f64::from(r) > -(1.0 + 2f64.powi(-23)) - 1e-12);
    }

    #[test]
    fn i64_round_to_odd_is_sticky() {
        assert_eq!(i64_to_f64_round_to_odd(12345), 12345.0);
        assert_eq!(i64_to_f64_round_to_odd(i64::MIN), -(2f64.powi(63)));
        let v = (1i64 << 60) + 1;
        let r = i64_to_f64_round_to_odd(v);
        assert!(r > (1i64 << 60) as f64);
        assert_eq!(i64_to_f64_round_to_odd(-v), -r);
    }
}
