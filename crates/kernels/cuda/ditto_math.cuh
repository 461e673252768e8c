// From Philox words to numbers: ditto's conversions and its own f32 `ln` / `sincospi`.
//
// Twin of crates/rng-gen/src/stream/{convert.rs, f32math.rs}, function for function:
// same constants (spelled as the same bit patterns), same order of operations, no fused
// multiply-add. Every operation below is a correctly rounded IEEE-754 add, sub, mul, div
// or sqrt, or integer work, so the host compiler (-ffp-contract=off, SSE floats) and
// NVRTC (--fmad=false) produce the same bits as Rust. Never call logf / sinf / __logf
// here: math libraries differ in the last bit between CPUs, GPUs and releases.
#ifndef DITTO_MATH_CUH
#define DITTO_MATH_CUH

// The host/device shim shared with tensor-core's kernels, by name: every ditto CUDA
// header is included by its file name, with crates/kernels/cuda and
// crates/tensor-core/cuda on the include path (ditto_build::ditto_include_dirs).
#include "ditto_host_device.cuh"
// tensor-core's portable f32 math: `ln` below is its logarithm body
// (ditto_portable_log_reduced) and its correctly rounded division, not a second copy.
#include "portable_math.cuh"

// ---------------------------------------------------------------------------------
// Correctly rounded square root (division is portable_math.cuh's ditto_portable_div).
// NVRTC's default (--prec-sqrt=true) already gives it for sqrtf; the intrinsic makes the
// rounding independent of compile flags.
DITTO_HD float ditto_sqrt(float x) {
#ifdef __CUDA_ARCH__
    return __fsqrt_rn(x);
#else
    return __builtin_sqrtf(x);
#endif
}

DITTO_HD float ditto_abs(float x) {
    return ditto_f32_from_bits(ditto_f32_to_bits(x) & 0x7FFFFFFFu);
}

// ---------------------------------------------------------------------------------
// Half-precision storage: f16 and bf16 travel as their uint16 bit patterns, converted
// with integer code (no cuda_fp16.h), so host and device share it. The rules are those
// of the `half` crate that rng-gen uses: round to nearest even, overflow to infinity,
// NaN kept quiet with the top mantissa bits it had.

// f32 -> f16, round to nearest even.
DITTO_HD uint16_t ditto_f32_to_f16(float value) {
    const uint32_t x = ditto_f32_to_bits(value);
#ifdef __CUDA_ARCH__
    // The GPU's conversion instruction rounds to nearest even, makes subnormals and
    // overflows to infinity exactly as the integer code below, in one instruction instead
    // of about twenty (the f16 random ops ran at a third of f32's speed on an H100
    // without it). Only NaN differs: the instruction returns the canonical 0x7FFF, while
    // the `half` crate keeps the payload's top bits, so NaNs take the integer path.
    if ((x & 0x7FFFFFFFu) <= 0x7F800000u) {
        unsigned short h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(value));
        return (uint16_t)h;
    }
#endif
    const uint32_t sign = x & 0x80000000u;
    const uint32_t exp = x & 0x7F800000u;
    const uint32_t man = x & 0x007FFFFFu;
    if (exp == 0x7F800000u) {  // infinity or NaN
        const uint32_t nan_bit = man == 0 ? 0u : 0x0200u;
        return (uint16_t)((sign >> 16) | 0x7C00u | nan_bit | (man >> 13));
    }
    const uint32_t half_sign = sign >> 16;
    const int32_t half_exp = (int32_t)(exp >> 23) - 127 + 15;
    if (half_exp >= 0x1F) {  // overflow
        return (uint16_t)(half_sign | 0x7C00u);
    }
    if (half_exp <= 0) {  // f16 subnormal or zero
        if (14 - half_exp > 24) {
            return (uint16_t)half_sign;
        }
        const uint32_t m = man | 0x00800000u;
        uint32_t half_man = m >> (14 - half_exp);
        const uint32_t round_bit = 1u << (13 - half_exp);
        // Round up when the dropped part is above half, or exactly half and odd.
        if ((m & round_bit) != 0 && (m & (3u * round_bit - 1u)) != 0) {
            half_man += 1;
        }
        return (uint16_t)(half_sign | half_man);
    }
    const uint32_t bits = half_sign | ((uint32_t)half_exp << 10) | (man >> 13);
    const uint32_t round_bit = 0x00001000u;
    // A carry out of the mantissa correctly bumps the exponent (up to infinity).
    if ((man & round_bit) != 0 && (man & (3u * round_bit - 1u)) != 0) {
        return (uint16_t)(bits + 1u);
    }
    return (uint16_t)bits;
}

// f16 -> f32, exact.
DITTO_HD float ditto_f16_to_f32(uint16_t h) {
#ifdef __CUDA_ARCH__
    // Exact in hardware for every non-NaN (subnormals included, with no loop); NaNs keep
    // the integer path's payload rule.
    if ((h & 0x7FFFu) <= 0x7C00u) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
        return f;
    }
#endif
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = h & 0x7C00u;
    uint32_t man = h & 0x03FFu;
    if (exp == 0x7C00u) {
        return ditto_f32_from_bits(man == 0 ? (sign | 0x7F800000u)
                                            : (sign | 0x7FC00000u | (man << 13)));
    }
    if (exp == 0) {
        if (man == 0) {
            return ditto_f32_from_bits(sign);
        }
        // Subnormal: shift the leading one into the implicit position.
        int32_t e = 0;
        while ((man & 0x0400u) == 0) {
            man <<= 1;
            e += 1;
        }
        const uint32_t f32_exp = (uint32_t)(127 - 15 + 1 - e) << 23;
        return ditto_f32_from_bits(sign | f32_exp | ((man & 0x03FFu) << 13));
    }
    return ditto_f32_from_bits(sign | (((exp >> 10) + 127 - 15) << 23) | (man << 13));
}

// f32 <-> bf16 (ditto_f32_to_bf16, ditto_bf16_to_f32) are in ditto_host_device.cuh,
// which tensor-core's kernels share: autocast rounds matmul operands with them.

// ---------------------------------------------------------------------------------
// Words to uniforms (docs/contract.md §5.2).

// Uniform f32 in [0, 1): the low 24 bits times 2^-24 (exact).
DITTO_HD float ditto_uniform_f32(uint32_t word) {
    return (float)(word & 0x00FFFFFFu) * ditto_f32_from_bits(0x33800000u);  // 2^-24
}

// Uniform f16 in [0, 1): the low 11 bits times 2^-11, exact in f16. Returned as f16 bits.
DITTO_HD uint16_t ditto_uniform_f16(uint32_t word) {
    return ditto_f32_to_f16((float)(word & 0x7FFu) * ditto_f32_from_bits(0x3A000000u));  // 2^-11
}

// Uniform bf16 in [0, 1): the low 8 bits times 2^-8, exact in bf16. Returned as bf16 bits.
DITTO_HD uint16_t ditto_uniform_bf16(uint32_t word) {
    return ditto_f32_to_bf16((float)(word & 0xFFu) * ditto_f32_from_bits(0x3B800000u));  // 2^-8
}

// Uniform f64 in [0, 1) from two words: the low 53 bits of w0 << 32 | w1, times 2^-53.
DITTO_HD double ditto_uniform_f64(uint32_t w0, uint32_t w1) {
    const uint64_t x = (uint64_t)w0 << 32 | w1;
    return (double)(x & ((1ull << 53) - 1)) * ditto_f64_from_bits(0x3CA0000000000000ull);  // 2^-53
}

// low + (high - low) * u in f64: one multiply then one add, never fused.
DITTO_HD double ditto_scale_uniform_f64(double u, double low, double high) {
    const double span = high - low;
    const double scaled = span * u;
    return low + scaled;
}

// An integer in [0, range): the high 64 bits of (w0 << 32 | w1) * range. Fixed
// consumption, no rejection loop.
DITTO_HD uint64_t ditto_below(uint32_t w0, uint32_t w1, uint64_t range) {
    return ditto_mul_hi_u64((uint64_t)w0 << 32 | w1, range);
}

// low + (high - low) * u: one multiply then one add, never fused.
DITTO_HD float ditto_scale_uniform_f32(float u, float low, float high) {
    const float span = high - low;
    const float scaled = span * u;
    return low + scaled;
}

// The normal sampler's v(w) = f32(w) * 2^-32 + 2^-33 in (0, 1]; the u32 -> f32
// conversion rounds to nearest even on both sides.
DITTO_HD float ditto_open_uniform_f32(uint32_t word) {
    return (float)word * ditto_f32_from_bits(0x2F800000u)  // 2^-32
           + ditto_f32_from_bits(0x2F000000u);               // 2^-33
}

// mean + std * z: multiply then add, never fused.
DITTO_HD float ditto_scale_normal_f32(float z, float mean, float std_dev) {
    const float scaled = std_dev * z;
    return mean + scaled;
}

// True with probability p: u < p.
DITTO_HD bool ditto_bernoulli(uint32_t word, float p) {
    return ditto_uniform_f32(word) < p;
}

// Dropout keeps an element iff u >= p.
DITTO_HD bool ditto_dropout_keep(uint32_t word, float p) {
    return ditto_uniform_f32(word) >= p;
}

// ---------------------------------------------------------------------------------
// ln: fdlibm / musl logf, step for step as in f32math.rs, which calls tensor-core's
// `log_reduced` for the body as this calls its twin ditto_portable_log_reduced; only the
// special cases are ln's own (any NaN with the sign bit gives the canonical NaN, as
// docs/contract.md §6.1 and f32math.rs's `ln` say).

// Natural logarithm, within 1 ulp. ln(0) = -inf, ln(x < 0) = NaN, ln(+inf) = +inf.
DITTO_HD float ditto_ln(float x) {
    const uint32_t bits = ditto_f32_to_bits(x);
    if (bits < 0x00800000u || (bits >> 31) != 0) {
        if ((bits << 1) == 0) {
            return ditto_f32_from_bits(0xFF800000u);  // -inf
        }
        if ((bits >> 31) != 0) {
            return ditto_f32_from_bits(0x7FC00000u);  // NaN
        }
        // Subnormal: scale into the normal range (exact), remember the exponent.
        return ditto_portable_log_reduced(ditto_f32_to_bits(x * ditto_f32_from_bits(0x4C000000u)),
                                          -25);  // 2^25
    }
    if (bits >= 0x7F800000u) {
        return x;
    }
    return ditto_portable_log_reduced(bits, 0);
}

// ---------------------------------------------------------------------------------
// sincospi: exact reduction of 2x to a quadrant and t in [-1/2, 1/2], then two short
// polynomials for sin(pi/2 t) and cos(pi/2 t), as in f32math.rs.

// (sin(pi x), cos(pi x)), each within 2 ulp; NaN for non-finite x.
DITTO_HD void ditto_sincospi(float x, float* sin_out, float* cos_out) {
    if ((ditto_f32_to_bits(x) & 0x7F800000u) == 0x7F800000u) {
        *sin_out = ditto_f32_from_bits(0x7FC00000u);
        *cos_out = ditto_f32_from_bits(0x7FC00000u);
        return;
    }
    const float round_to_integer = ditto_f32_from_bits(0x4B400000u);  // 1.5 * 2^23
    const float r = x + x;
    const float q = ditto_abs(r) < ditto_f32_from_bits(0x4B000000u)  // 2^23
                        ? (r + round_to_integer) - round_to_integer
                        : r;
    const float t = r - q;
    const int32_t quadrant =
        ditto_abs(q) < ditto_f32_from_bits(0x4E800000u) ? ((int32_t)q & 3) : 0;  // 2^30

    const float s = t * t;
    float sin_poly = ditto_f32_from_bits(0xBB96C981u);
    sin_poly = sin_poly * s + ditto_f32_from_bits(0x3DA32F49u);
    sin_poly = sin_poly * s + ditto_f32_from_bits(0xBF255DDDu);
    sin_poly = sin_poly * s + ditto_f32_from_bits(0x3FC90FDBu);
    const float sin_t = t * sin_poly;
    float cos_poly = ditto_f32_from_bits(0x3A6DAFD4u);
    cos_poly = cos_poly * s + ditto_f32_from_bits(0xBCAAE5C4u);
    cos_poly = cos_poly * s + ditto_f32_from_bits(0x3E81E0F5u);
    cos_poly = cos_poly * s + ditto_f32_from_bits(0xBF9DE9E6u);
    const float cos_t = 1.0f + s * cos_poly;

    switch (quadrant) {
        case 0: *sin_out = sin_t; *cos_out = cos_t; break;
        case 1: *sin_out = cos_t; *cos_out = -sin_t; break;
        case 2: *sin_out = -sin_t; *cos_out = -cos_t; break;
        default: *sin_out = -cos_t; *cos_out = sin_t; break;
    }
}

// Box-Muller on one pair of words: z0 = r cos, z1 = r sin (elements 2m and 2m+1).
DITTO_HD void ditto_box_muller(uint32_t w0, uint32_t w1, float* z0, float* z1) {
    const float u1 = ditto_open_uniform_f32(w0);
    const float u2 = ditto_open_uniform_f32(w1);
    const float radius = ditto_sqrt(-2.0f * ditto_ln(u1));
    float sin_v, cos_v;
    ditto_sincospi(2.0f * u2, &sin_v, &cos_v);
    *z0 = radius * cos_v;
    *z1 = radius * sin_v;
}

#endif  // DITTO_MATH_CUH
