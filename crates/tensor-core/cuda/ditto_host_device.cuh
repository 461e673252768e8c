// The host/device shim every ditto CUDA header includes: tensor-core's kernels
// (tensor_ops.cuh) and the random kernels (crates/kernels/cuda/*.cuh), so both folders, and a
// downstream crate's kernels, are compiled the same two ways from one definition.
//
// The headers are compiled twice: by NVRTC for the GPU, and by the host C++ compiler for
// the parity tests (docs/contract.md §11), which check them against the Rust code bit for
// bit. This file makes both work: NVRTC has no <stdint.h>, and a host compiler has no
// __host__ / __device__. The bit casts and the 64-bit high product use the GPU's
// intrinsics on the device and portable code on the host.
#ifndef DITTO_HOST_DEVICE_CUH
#define DITTO_HOST_DEVICE_CUH

#ifdef __CUDACC_RTC__
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef int int32_t;
typedef long long int64_t;
#else
#include <stdint.h>
#include <string.h>
#endif

#ifndef __CUDACC__
// Host C++ compiler: the CUDA qualifiers mean nothing here.
#define __host__
#define __device__
#define __forceinline__ inline
#endif

// Every function in ditto's headers runs on both sides.
#define DITTO_HD __host__ __device__ __forceinline__

// float <-> bits without type punning, and the high half of a 64-bit product. Written
// once per side: the GPU's intrinsics on the device; on the host one memcpy bit cast
// (the shape of C++20's std::bit_cast, which C++17 lacks) and a 128-bit product, both
// compiled to a register move or a single multiply.
#ifdef __CUDA_ARCH__
DITTO_HD float ditto_f32_from_bits(uint32_t bits) { return __uint_as_float(bits); }
DITTO_HD uint32_t ditto_f32_to_bits(float f) { return __float_as_uint(f); }
DITTO_HD double ditto_f64_from_bits(uint64_t bits) { return __longlong_as_double((long long)bits); }
DITTO_HD uint64_t ditto_mul_hi_u64(uint64_t a, uint64_t b) { return __umul64hi(a, b); }
#else
template <typename To, typename From>
DITTO_HD To ditto_bit_cast(From from) {
    static_assert(sizeof(To) == sizeof(From), "a bit cast keeps the width");
    To to;
    memcpy(&to, &from, sizeof to);
    return to;
}
DITTO_HD float ditto_f32_from_bits(uint32_t bits) { return ditto_bit_cast<float>(bits); }
DITTO_HD uint32_t ditto_f32_to_bits(float f) { return ditto_bit_cast<uint32_t>(f); }
DITTO_HD double ditto_f64_from_bits(uint64_t bits) { return ditto_bit_cast<double>(bits); }
DITTO_HD uint64_t ditto_mul_hi_u64(uint64_t a, uint64_t b) {
    return (uint64_t)(((unsigned __int128)a * b) >> 64);
}
#endif

// bf16 as its uint16 bit pattern, converted with integer code (no cuda_bf16.h) so host
// and device share it, by the rules of the `half` crate: round to nearest even, overflow
// to infinity, NaN kept quiet with the top mantissa bits it had. The random kernels
// store bf16 with it; tensor-core's autocast rounds matmul operands with it.
// f32 -> bf16, round to nearest even.
DITTO_HD uint16_t ditto_f32_to_bf16(float value) {
    const uint32_t x = ditto_f32_to_bits(value);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: keep it quiet
        return (uint16_t)((x >> 16) | 0x0040u);
    }
    const uint32_t round_bit = 0x00008000u;
    if ((x & round_bit) != 0 && (x & (3u * round_bit - 1u)) != 0) {
        return (uint16_t)((x >> 16) + 1u);
    }
    return (uint16_t)(x >> 16);
}

// bf16 -> f32, exact (NaN made quiet, as `half` does).
DITTO_HD float ditto_bf16_to_f32(uint16_t b) {
    const uint32_t bits = (b & 0x7FFFu) > 0x7F80u ? ((uint32_t)b | 0x0040u) : (uint32_t)b;
    return ditto_f32_from_bits(bits << 16);
}

#endif  // DITTO_HOST_DEVICE_CUH
