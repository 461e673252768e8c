//! f32 to f16 / bf16, rounding to nearest even, and back (exact): ditto's own
//! conversions, bit for bit those of the `half` crate (and of `ditto_f32_to_f16`,
//! `ditto_f16_to_f32`, ... in `kernels/cuda/ditto_math.cuh`, their CUDA twins): overflow
//! to infinity, NaN kept quiet with the top mantissa bits it had.
//!
//! Why not `half::f16::from_f32`? It is an out-of-line call per element (it picks the
//! F16C instruction at run time), which no loop around it can vectorise: f16 samplers ran
//! at half the speed of bf16 ones. These are straight-line integer code (every case
//! computed, the right one selected), so a sampler's loop over a batch becomes vector
//! instructions. Tests compare them with `half` on every one of the 2^32 f32 inputs.

use half::{bf16, f16};

/// `x` rounded to the nearest f16 (ties to even).
#[must_use]
#[inline(always)]
pub fn f32_to_f16(x: f32) -> f16 {
    f16::from_bits(f32_to_f16_bits(x))
}

/// `x` rounded to the nearest bf16 (ties to even).
#[must_use]
#[inline(always)]
pub fn f32_to_bf16(x: f32) -> bf16 {
    bf16::from_bits(f32_to_bf16_bits(x))
}

/// The bits of [`f32_to_f16`].
#[must_use]
#[inline(always)]
pub fn f32_to_f16_bits(x: f32) -> u16 {
    let x = x.to_bits();
    let sign = (x >> 16) & 0x8000;
    let exp = x & 0x7F80_0000;
    let man = x & 0x007F_FFFF;

    // Infinity or NaN: a NaN keeps its top mantissa bits and is made quiet.
    let nan_bit = if man == 0 { 0 } else { 0x0200 };
    let not_finite = sign | 0x7C00 | nan_bit | (man >> 13);

    // Normal f16: drop 13 mantissa bits, rounding to nearest even; a carry out of the
    // mantissa correctly bumps the exponent (up to infinity).
    let half_exp = (exp >> 23) as i32 - 127 + 15;
    let truncated = sign | ((half_exp as u32) << 10) | (man >> 13);
    let round_up = man & 0x1000 != 0 && man & (3 * 0x1000 - 1) != 0;
    let normal = truncated.wrapping_add(u32::from(round_up)); // wraps only in unused lanes

    // f16 subnormal or zero: shift the mantissa with its implicit one right by 14 to 24
    // places (a shift of 25 or more leaves +-0, which the clamp to 25 gives).
    let shift = (14 - half_exp).clamp(14, 25) as u32;
    let m = man | 0x0080_0000;
    let round_bit = 1u32 << (shift - 1);
    let round_up = m & round_bit != 0 && m & (3 * round_bit - 1) != 0;
    let subnormal = sign | ((m >> shift) + u32::from(round_up));

    let bits = if exp == 0x7F80_0000 {
        not_finite
    } else if half_exp >= 0x1F {
        sign | 0x7C00
    } else if half_exp <= 0 {
        subnormal
    } else {
        normal
    };
    bits as u16
}

/// The bits of [`f32_to_bf16`].
#[must_use]
#[inline(always)]
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let x = x.to_bits();
    let is_nan = x & 0x7FFF_FFFF > 0x7F80_0000;
    let round_up = x & 0x8000 != 0 && x & (3 * 0x8000 - 1) != 0;
    let rounded = (x >> 16) + u32::from(round_up);
    let bits = if is_nan { (x >> 16) | 0x0040 } else { rounded };
    bits as u16
}

/// `h` as an f32 (exact).
#[must_use]
#[inline(always)]
pub fn f16_to_f32(h: f16) -> f32 {
    let h = u32::from(h.to_bits());
    let sign = (h & 0x8000) << 16;
    let exp = h & 0x7C00;
    let man = h & 0x03FF;
    // Subnormal (or zero): man * 2^-24, exact in f32.
    let subnormal = f32::from_bits(sign | (man as f32 * (1.0 / 16_777_216.0)).to_bits());
    let normal = f32::from_bits(sign | ((exp >> 10) + 127 - 15) << 23 | man << 13);
    let nan_bit = if man == 0 { 0 } else { 0x0040_0000 };
    let not_finite = f32::from_bits(sign | 0x7F80_0000 | nan_bit | man << 13);
    if exp == 0x7C00 {
        not_finite
    } else if exp == 0 {
        subnormal
    } else {
        normal
    }
}

/// `b` as an f32 (exact; a NaN is made quiet, as `half` does).
#[must_use]
#[inline(always)]
pub fn bf16_to_f32(b: bf16) -> f32 {
    let b = u32::from(b.to_bits());
    let quiet = if b & 0x7FFF > 0x7F80 { 0x0040 } else { 0 };
    f32::from_bits((b | quiet) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    /// Every f32 bit pattern, in parallel: the same bits as `half`.
    #[test]
    fn every_f32_converts_like_half() {
        let bad = (0u32..=0xFFFF).into_par_iter().find_map_any(|high| {
            (0u32..=0xFFFF).find_map(|low| {
                let x = f32::from_bits(high << 16 | low);
                let ours = (f32_to_f16_bits(x), f32_to_bf16_bits(x));
                let theirs = (f16::from_f32(x).to_bits(), bf16::from_f32(x).to_bits());
                (ours != theirs).then_some((x.to_bits(), ours, theirs))
            })
        });
        assert_eq!(bad, None, "(input bits, ours (f16, bf16), half's)");
    }

    #[test]
    fn every_half_widens_like_half() {
        for bits in 0..=u16::MAX {
            let (h, b) = (f16::from_bits(bits), bf16::from_bits(bits));
            assert_eq!(
                f16_to_f32(h).to_bits(),
                h.to_f32().to_bits(),
                "f16 {bits:#x}"
            );
            assert_eq!(
                bf16_to_f32(b).to_bits(),
                b.to_f32().to_bits(),
                "bf16 {bits:#x}"
            );
        }
    }
}
