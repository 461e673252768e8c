// ditto's own f32 exp, log, expm1 and tanh for portable arithmetic (docs/contract.md §14).
//
// Twin of crates/tensor-core/src/portable/math.rs and hyperbolic.rs, function for function: same constants
// (spelled as the same bit patterns), same order of operations, no fused multiply-add.
// Every operation is a correctly rounded IEEE-754 add, sub, mul or div, or integer work,
// so the host compiler (-ffp-contract=off, SSE floats) and NVRTC (--fmad=false, and
// __fdiv_rn) give the same bits as Rust. Never call expf / logf / __expf here: those are
// libdevice's (or the host's libm), which differ from each other in the last bit.
//
// The random kernels' `ditto_ln` (crates/kernels/cuda/ditto_math.cuh) includes this header and
// calls ditto_portable_log_reduced, as rng-gen's `ln` calls math.rs's `log_reduced`: one
// logarithm per language.
#ifndef DITTO_PORTABLE_MATH_CUH
#define DITTO_PORTABLE_MATH_CUH

#include "ditto_host_device.cuh"

// Correctly rounded f32 division whatever the compile flags.
DITTO_HD float ditto_portable_div(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

// 2^k for -126 <= k <= 127, from its bits.
DITTO_HD float ditto_portable_pow2(int32_t k) {
    return ditto_f32_from_bits((uint32_t)(k + 127) << 23);
}

// y * 2^k for y in about [0.7, 1.5] and -150 <= k <= 128, rounded once.
DITTO_HD float ditto_portable_scale(float y, int32_t k) {
    if (k > 127) return y * ditto_portable_pow2(127) * ditto_portable_pow2(k - 127);
    if (k < -126) return (y * ditto_portable_pow2(-102)) * ditto_portable_pow2(k + 102);
    return y * ditto_portable_pow2(k);
}

// e^x, fdlibm / musl expf step for step as in math.rs.
DITTO_HD float ditto_portable_exp(float x) {
    const float ln2_hi = ditto_f32_from_bits(0x3F317200u);
    const float ln2_lo = ditto_f32_from_bits(0x35BFBE8Eu);
    const float inv_ln2 = ditto_f32_from_bits(0x3FB8AA3Bu);
    const float p1 = ditto_f32_from_bits(0x3E2AAA8Fu);
    const float p2 = ditto_f32_from_bits(0xBB355215u);

    const uint32_t bits = ditto_f32_to_bits(x);
    const bool negative = (bits >> 31) != 0;
    const uint32_t magnitude = bits & 0x7FFFFFFFu;
    if (magnitude >= 0x42AEAC50u) {
        if (magnitude > 0x7F800000u) return x;                              // NaN
        if (magnitude >= 0x42B17218u && !negative) return ditto_f32_from_bits(0x7F800000u);  // +inf
        if (negative && magnitude >= 0x42CFF1B5u) return 0.0f;
    }
    float hi, lo;
    int32_t k;
    if (magnitude > 0x3EB17218u) {
        if (magnitude > 0x3F851592u) {
            k = (int32_t)(inv_ln2 * x + (negative ? -0.5f : 0.5f));  // truncation, as Rust's `as`
        } else {
            k = negative ? -1 : 1;
        }
        const float kf = (float)k;
        hi = x - kf * ln2_hi;
        lo = kf * ln2_lo;
    } else if (magnitude > 0x39000000u) {
        k = 0;
        hi = x;
        lo = 0.0f;
    } else {
        return 1.0f + x;
    }
    const float r = hi - lo;
    const float rr = r * r;
    const float c = r - rr * (p1 + rr * p2);
    const float y = 1.0f + ((ditto_portable_div(r * c, 2.0f - c) - lo) + hi);
    return k == 0 ? y : ditto_portable_scale(y, k);
}

// ln(2^k * x) for the bits of a positive normal x (fdlibm / musl logf).
DITTO_HD float ditto_portable_log_reduced(uint32_t bits, int32_t k) {
    const float ln2_hi = ditto_f32_from_bits(0x3F317180u);
    const float ln2_lo = ditto_f32_from_bits(0x3717F7D1u);
    const float lg1 = ditto_f32_from_bits(0x3F2AAAAAu);
    const float lg2 = ditto_f32_from_bits(0x3ECCCE13u);
    const float lg3 = ditto_f32_from_bits(0x3E91E9EEu);
    const float lg4 = ditto_f32_from_bits(0x3E789E26u);
    bits += 0x3F800000u - 0x3F3504F3u;
    k += (int32_t)(bits >> 23) - 0x7F;
    const float m = ditto_f32_from_bits((bits & 0x007FFFFFu) + 0x3F3504F3u);
    const float f = m - 1.0f;
    const float s = ditto_portable_div(f, 2.0f + f);
    const float z = s * s;
    const float w = z * z;
    const float t1 = w * (lg2 + w * lg4);
    const float t2 = z * (lg1 + w * lg3);
    const float r = t2 + t1;
    const float half_f_squared = 0.5f * f * f;
    const float dk = (float)k;
    float result = s * (half_f_squared + r);
    result += dk * ln2_lo;
    result -= half_f_squared;
    result += f;
    return result + dk * ln2_hi;
}

// Natural logarithm: log(+-0) = -inf, log(x < 0) = NaN, log(+inf) = +inf, NaN stays NaN.
DITTO_HD float ditto_portable_log(float x) {
    const uint32_t bits = ditto_f32_to_bits(x);
    if (bits < 0x00800000u || (bits >> 31) != 0) {
        if ((bits << 1) == 0) return ditto_f32_from_bits(0xFF800000u);
        if ((bits >> 31) != 0) return x != x ? x : ditto_f32_from_bits(0x7FC00000u);
        return ditto_portable_log_reduced(ditto_f32_to_bits(x * ditto_f32_from_bits(0x4C000000u)), -25);
    }
    if (bits >= 0x7F800000u) return x;
    return ditto_portable_log_reduced(bits, 0);
}

// log of a positive f64 sum, as f32: log(hi) of its f32 rounding hi, plus the relative
// rest (total - hi) / hi (exact subtraction, correctly rounded f64 division), so a sum
// near 1 keeps its small logarithm. log_softmax's `l` in portable mode (math.rs twin:
// `log_of_sum`).
DITTO_HD float ditto_portable_log_of_sum(double total) {
    const float hi = (float)total;
    if (!(hi > 0.0f) || hi == ditto_f32_from_bits(0x7F800000u)) return ditto_portable_log(hi);
    const float rest = (float)((total - (double)hi) / (double)hi);
    return ditto_portable_log(hi) + rest;
}

// e^x - 1, accurate near 0 (fdlibm / musl expm1f), step for step as hyperbolic.rs's
// `expm1`: tanh is built on it.
DITTO_HD float ditto_portable_expm1(float x) {
    const float ln2_hi = ditto_f32_from_bits(0x3F317180u);
    const float ln2_lo = ditto_f32_from_bits(0x3717F7D1u);
    const float inv_ln2 = ditto_f32_from_bits(0x3FB8AA3Bu);
    const float overflow_threshold = ditto_f32_from_bits(0x42B17180u);
    const float q1 = ditto_f32_from_bits(0xBD088868u);
    const float q2 = ditto_f32_from_bits(0x3ACF3010u);

    const uint32_t bits = ditto_f32_to_bits(x);
    const uint32_t magnitude = bits & 0x7FFFFFFFu;
    const bool negative = (bits >> 31) != 0;
    if (magnitude >= 0x4195B844u) {
        if (magnitude > 0x7F800000u) return x;  // NaN
        if (negative) return -1.0f;
        if (x > overflow_threshold) return x * ditto_portable_pow2(127);
    }
    float c;
    int32_t k;
    if (magnitude > 0x3EB17218u) {
        float hi, lo;
        if (magnitude < 0x3F851592u) {
            if (negative) {
                hi = x + ln2_hi;
                lo = -ln2_lo;
                k = -1;
            } else {
                hi = x - ln2_hi;
                lo = ln2_lo;
                k = 1;
            }
        } else {
            k = (int32_t)(inv_ln2 * x + (negative ? -0.5f : 0.5f));  // truncation, as Rust's `as`
            const float t = (float)k;
            hi = x - t * ln2_hi;
            lo = t * ln2_lo;
        }
        x = hi - lo;
        c = (hi - x) - lo;
    } else if (magnitude < 0x33000000u) {
        return x;
    } else {
        k = 0;
        c = 0.0f;
    }
    const float hfx = 0.5f * x;
    const float hxs = x * hfx;
    const float r1 = 1.0f + hxs * (q1 + hxs * q2);
    const float t = 3.0f - r1 * hfx;
    float e = hxs * ditto_portable_div(r1 - t, 6.0f - x * t);
    if (k == 0) return x - (x * e - hxs);
    e = x * (e - c) - c;
    e -= hxs;
    if (k == -1) return 0.5f * (x - e) - 0.5f;
    if (k == 1) {
        if (x < -0.25f) return -2.0f * (e - (x + 0.5f));
        return 1.0f + 2.0f * (x - e);
    }
    if (k < 0 || k > 56) {
        float y = x - e + 1.0f;
        y = k == 128 ? y * 2.0f * ditto_portable_pow2(127) : y * ditto_portable_pow2(k);
        return y - 1.0f;
    }
    const float two_pow_minus_k = ditto_portable_pow2(-k);
    if (k < 23) return (x - e + (1.0f - two_pow_minus_k)) * ditto_portable_pow2(k);
    return (x - (e + two_pow_minus_k) + 1.0f) * ditto_portable_pow2(k);
}

// The hyperbolic tangent (musl tanhf on expm1), step for step as hyperbolic.rs's `tanh`:
// odd bit for bit, tanh(+-inf) = +-1, NaN stays NaN.
DITTO_HD float ditto_portable_tanh(float x) {
    const uint32_t bits = ditto_f32_to_bits(x);
    const bool negative = (bits >> 31) != 0;
    const uint32_t magnitude = bits & 0x7FFFFFFFu;
    const float a = ditto_f32_from_bits(magnitude);
    float t;
    if (magnitude > 0x3F0C9F54u) {
        if (magnitude > 0x7F800000u) return x;  // NaN
        if (magnitude > 0x41200000u) {
            t = 1.0f;
        } else {
            t = ditto_portable_expm1(2.0f * a);
            t = 1.0f - ditto_portable_div(2.0f, t + 2.0f);
        }
    } else if (magnitude > 0x3E82C578u) {
        t = ditto_portable_expm1(2.0f * a);
        t = ditto_portable_div(t, t + 2.0f);
    } else if (magnitude >= 0x00800000u) {
        t = ditto_portable_expm1(-2.0f * a);
        t = ditto_portable_div(-t, t + 2.0f);
    } else {
        t = a;  // subnormal or zero: tanh(x) rounds to x
    }
    return negative ? -t : t;
}

#endif  // DITTO_PORTABLE_MATH_CUH
