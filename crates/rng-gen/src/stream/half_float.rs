//! f32 to f16 / bf16, rounding to nearest even, and back (exact): ditto's own
//! conversions, bit for bit those of the `half` crate (and of `ditto_f32_to_f16`,
//! `ditto_f16_to_f32`, ... in `crates/kernels/cuda/ditto_math.cuh`, their CUDA twins): overflow
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
///
/// Each case is computed and the right one selected: finite values below 2^-14 (f16
/// subnormals and zero) by one f32 addition that rounds them to the f16 grid, normal
/// values by adding the rounding bias to the bits (a carry out of the mantissa bumps the
/// exponent, up to infinity), and values from 2^16 on to infinity, NaN keeping its top
/// mantissa bits, made quiet.
#[must_use]
#[inline(always)]
pub fn f32_to_f16_bits(x: f32) -> u16 {
    /// 2^16 as f32 bits: every value from here on is infinite in f16.
    const F16_OVERFLOW: u32 = (127 + 16) << 23;
    /// 2^-14, the smallest normal f16.
    const F16_MIN_NORMAL: u32 = (127 - 14) << 23;
    /// 0.5 as f32 bits: adding 0.5 to a value below 2^-14 rounds it to a multiple of
    /// 2^-24 (the f16 subnormal spacing), to nearest even, and leaves that multiple in the
    /// low mantissa bits.
    const SUBNORMAL_MAGIC: u32 = 126 << 23;
    let bits = x.to_bits();
    let sign = (bits >> 16) & 0x8000;
    let abs = bits & 0x7FFF_FFFF;

    let nan_or_inf = if abs > 0x7F80_0000 {
        0x7E00 | ((abs >> 13) & 0x03FF)
    } else {
        0x7C00
    };
    let magic = f32::from_bits(SUBNORMAL_MAGIC);
    let subnormal = (f32::from_bits(abs) + magic)
        .to_bits()
        .wrapping_sub(SUBNORMAL_MAGIC);
    // Rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even.
    let odd = (abs >> 13) & 1;
    let rebias = ((15u32.wrapping_sub(127)) << 23).wrapping_add(0x0FFF);
    let normal = abs.wrapping_add(rebias).wrapping_add(odd) >> 13;

    let magnitude = if abs >= F16_OVERFLOW {
        nan_or_inf
    } else if abs < F16_MIN_NORMAL {
        subnormal
    } else {
        normal
    };
    (magnitude | sign) as u16
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

    /// An input whose conversion differs: its bits, ours (f16, bf16), `half`'s.
    type Difference = (u32, (u16, u16), (u16, u16));

    /// The first f32 among every low half-word under each of `highs` (the upper 16 bits)
    /// whose f16 or bf16 bits differ from `half`'s.
    fn first_difference(highs: impl ParallelIterator<Item = u32>) -> Option<Difference> {
        highs.find_map_any(|high| {
            (0u32..=0xFFFF).find_map(|low| {
                let x = f32::from_bits(high << 16 | low);
                let ours = (f32_to_f16_bits(x), f32_to_bf16_bits(x));
                let theirs = (f16::from_f32(x).to_bits(), bf16::from_f32(x).to_bits());
                (ours != theirs).then_some((x.to_bits(), ours, theirs))
            })
        })
    }

    /// The default run's sweep, a sixth of all inputs: every f32 whose exponent is where
    /// f16 rounds to zero, to a subnormal, to a normal or overflows (f32 exponents
    /// 102..=143, both signs), and every 61st other upper half-word (bf16's rounding,
    /// infinities and NaNs). Every low half-word is taken, as rounding reads those bits.
    #[test]
    fn f32_sweep_converts_like_half() {
        let near_f16 = |high: u32| (102..=143).contains(&((high >> 7) & 0xFF));
        let highs = (0u32..=0xFFFF)
            .into_par_iter()
            .filter(move |&high| near_f16(high) || high % 61 == 0);
        assert_eq!(
            first_difference(highs),
            None,
            "(input bits, ours (f16, bf16), half's)"
        );
    }

    /// Every f32 bit pattern, in parallel: the same bits as `half`.
    #[test]
    #[ignore = "heavy: every f32 bit pattern (30 s unoptimised); CI runs it in release"]
    fn every_f32_converts_like_half() {
        assert_eq!(
            first_difference((0u32..=0xFFFF).into_par_iter()),
            None,
            "(input bits, ours (f16, bf16), half's)"
        );
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
