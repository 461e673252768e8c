//! ditto's own f32 `tanh` for portable arithmetic (docs/contract.md §14), and the
//! `expm1` it is built on: GELU's tanh approximation (GPT-2's activation) needs `tanh`,
//! and the platform's `tanhf` (libm on a CPU, libdevice on CUDA) differs between
//! machines in the last bit, as `expf` does.
//!
//! Both follow fdlibm (musl's `expm1f` / `tanhf`) step for step, like
//! [`super::math`]'s `exp` and `log`: only correctly rounded add, sub, mul and div, and
//! bit operations; no fused multiply-add. The CUDA twin is
//! `crates/tensor-core/cuda/portable_math.cuh` (`ditto_portable_expm1`,
//! `ditto_portable_tanh`), with the same constants spelled as the same bit patterns and
//! the same order of operations. Why `expm1` rather than `exp`? `tanh(x) = (e^2x - 1) /
//! (e^2x + 1)` loses every significant bit near 0 when `e^2x - 1` is computed from
//! `e^2x`; `expm1` keeps them, so `tanh` stays within about an ulp everywhere
//! (`tests/integration/portable_math_exhaustive.rs` measures both over every f32 input).

const LN2_HI: f32 = f32::from_bits(0x3f31_7180); // 6.9313812256e-01
const LN2_LO: f32 = f32::from_bits(0x3717_f7d1); // 9.0580006145e-06
const INV_LN2: f32 = f32::from_bits(0x3fb8_aa3b); // 1.4426950216e+00
/// Above this `e^x - 1` overflows (fdlibm's `o_threshold`).
const OVERFLOW_THRESHOLD: f32 = f32::from_bits(0x42b1_7180); // 8.8721679688e+01
/// Scaled coefficients of the rational approximation of `6/x (1 + 2 (1/(e^x - 1) -
/// 1/x))` on `[-0.34568, 0.34568]` (musl `expm1f`: `-0x888868.0p-28`, `0xcf3010.0p-33`).
const Q1: f32 = -0x0088_8868 as f32 / (1u32 << 28) as f32; // -3.3333212137e-2
const Q2: f32 = 0x00cf_3010 as f32 / (1u64 << 33) as f32; // 1.5807170421e-3

/// `2^k` for `-126 <= k <= 127`, from its bits.
fn pow2(k: i32) -> f32 {
    f32::from_bits(((0x7f + k) as u32) << 23)
}

/// `e^x - 1`, accurate near 0. `expm1(NaN) = NaN`, `expm1(+inf) = +inf`,
/// `expm1(-inf) = -1`; overflows to `+inf` above 88.72168.
#[must_use]
pub fn expm1(mut x: f32) -> f32 {
    let bits = x.to_bits();
    let magnitude = bits & 0x7fff_ffff;
    let negative = bits >> 31 != 0;
    if magnitude >= 0x4195_b844 {
        // |x| >= 27 ln 2, or NaN.
        if magnitude > 0x7f80_0000 {
            return x;
        }
        if negative {
            return -1.0;
        }
        if x > OVERFLOW_THRESHOLD {
            return x * pow2(127);
        }
    }
    let (c, k);
    if magnitude > 0x3eb1_7218 {
        // |x| > ln(2) / 2: x = k ln2 + r.
        let (hi, lo);
        if magnitude < 0x3f85_1592 {
            // and |x| < 1.5 ln 2: k = +-1.
            (hi, lo, k) = if negative {
                (x + LN2_HI, -LN2_LO, -1)
            } else {
                (x - LN2_HI, LN2_LO, 1)
            };
        } else {
            // Truncation of x / ln2 +- 1/2, as C's conversion to int.
            k = (INV_LN2 * x + if negative { -0.5 } else { 0.5 }) as i32;
            let t = k as f32;
            hi = x - t * LN2_HI; // exact
            lo = t * LN2_LO;
        }
        x = hi - lo;
        c = (hi - x) - lo;
    } else if magnitude < 0x3300_0000 {
        // |x| < 2^-25: e^x - 1 rounds to x.
        return x;
    } else {
        k = 0;
        c = 0.0;
    }
    // x is in the primary range [-0.34568, 0.34568].
    let hfx = 0.5 * x;
    let hxs = x * hfx;
    let r1 = 1.0 + hxs * (Q1 + hxs * Q2);
    let t = 3.0 - r1 * hfx;
    let mut e = hxs * ((r1 - t) / (6.0 - x * t));
    if k == 0 {
        return x - (x * e - hxs);
    }
    e = x * (e - c) - c;
    e -= hxs;
    // e^x = 2^k (x_reduced - e + 1).
    if k == -1 {
        return 0.5 * (x - e) - 0.5;
    }
    if k == 1 {
        if x < -0.25 {
            return -2.0 * (e - (x + 0.5));
        }
        return 1.0 + 2.0 * (x - e);
    }
    if !(0..=56).contains(&k) {
        // e^x - 1 is e^x to working precision, or about -1.
        let y = x - e + 1.0;
        let y = if k == 128 {
            y * 2.0 * pow2(127)
        } else {
            y * pow2(k)
        };
        return y - 1.0;
    }
    let two_pow_minus_k = pow2(-k);
    if k < 23 {
        (x - e + (1.0 - two_pow_minus_k)) * pow2(k)
    } else {
        (x - (e + two_pow_minus_k) + 1.0) * pow2(k)
    }
}

/// The hyperbolic tangent. `tanh(+-inf) = +-1`, `tanh(NaN) = NaN`, odd (`tanh(-x) =
/// -tanh(x)` bit for bit), and `tanh(+-0) = +-0`.
#[must_use]
pub fn tanh(x: f32) -> f32 {
    let bits = x.to_bits();
    let negative = bits >> 31 != 0;
    let magnitude = bits & 0x7fff_ffff;
    let a = f32::from_bits(magnitude);
    let t = if magnitude > 0x3f0c_9f54 {
        // |x| > ln(3) / 2 ~= 0.5493, or NaN.
        if magnitude > 0x7f80_0000 {
            return x;
        }
        if magnitude > 0x4120_0000 {
            // |x| > 10: tanh rounds to 1.
            1.0
        } else {
            let t = expm1(2.0 * a);
            1.0 - 2.0 / (t + 2.0)
        }
    } else if magnitude > 0x3e82_c578 {
        // |x| > ln(5/3) / 2 ~= 0.2554.
        let t = expm1(2.0 * a);
        t / (t + 2.0)
    } else if magnitude >= 0x0080_0000 {
        // |x| >= 2^-126.
        let t = expm1(-2.0 * a);
        -t / (t + 2.0)
    } else {
        // Subnormal or zero: tanh(x) rounds to x.
        a
    };
    if negative {
        -t
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coefficients_are_musl_bit_patterns() {
        assert_eq!(Q1.to_bits(), 0xbd08_8868);
        assert_eq!(Q2.to_bits(), 0x3acf_3010);
    }

    #[test]
    fn special_values() {
        assert_eq!(expm1(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(expm1(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(expm1(f32::INFINITY), f32::INFINITY);
        assert_eq!(expm1(f32::NEG_INFINITY), -1.0);
        assert!(expm1(f32::NAN).is_nan());
        assert_eq!(expm1(89.0), f32::INFINITY);
        assert_eq!(expm1(-30.0), -1.0);
        assert_eq!(tanh(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(tanh(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(tanh(f32::INFINITY), 1.0);
        assert_eq!(tanh(f32::NEG_INFINITY), -1.0);
        assert!(tanh(f32::NAN).is_nan());
        assert_eq!(tanh(20.0), 1.0);
        let tiny = f32::from_bits(5);
        assert_eq!(tanh(tiny), tiny);
    }

    #[test]
    fn close_to_f64_on_a_sweep() {
        for i in 0..200_000u32 {
            let x = i as f32 / 10_000.0 - 10.0;
            let want = f64::from(x).exp_m1();
            let got = f64::from(expm1(x));
            assert!(
                (got - want).abs() <= 1.2e-7 * want.abs().max(1e-38),
                "expm1({x}) = {got}, want {want}"
            );
            let want = f64::from(x).tanh();
            let got = f64::from(tanh(x));
            assert!(
                (got - want).abs() <= 2.4e-7 * want.abs().max(1e-38),
                "tanh({x}) = {got}, want {want}"
            );
            assert_eq!(tanh(-x).to_bits(), (-tanh(x)).to_bits());
        }
        // Near zero, where e^2x - 1 from e^2x would cancel: still within about an ulp.
        for i in 1..10_000u32 {
            let x = i as f32 * 1e-7;
            let want = f64::from(x).tanh();
            assert!(
                (f64::from(tanh(x)) - want).abs() <= 2.4e-7 * want,
                "tanh({x})"
            );
        }
    }
}
