// One Philox block of every random op: the per-element rules of docs/contract.md §5,
// written once for the GPU kernels (random.cu loops over blocks) and for the host parity
// tests (tests/host-parity/host/parity_shim.cpp calls the very same functions for one
// block index).
// Dropout's blocks are in dropout.cuh, which builds on the element types and loads/stores
// here.
//
// Block `b` of an op with base offset `o` is Philox block `o + b`; its four words are
// words 4b..4b+3 of the op. With one word per element it yields elements 4b..4b+3;
// with two (f64 uniform, randint) elements 2b, 2b+1. Normal pairs (words 2m, 2m+1)
// never straddle a block. A thread that computes whole blocks therefore produces the
// same elements whatever the grid and block size.
#ifndef DITTO_RANDOM_BLOCKS_CUH
#define DITTO_RANDOM_BLOCKS_CUH

// The host/device shim shared with tensor-core's kernels, by name: every ditto CUDA
// header is included by its file name, with crates/kernels/cuda and
// crates/tensor-core/cuda on the include path (ditto_build::ditto_include_dirs).
#include "ditto_host_device.cuh"
#include "philox.cuh"
#include "ditto_math.cuh"

// ---------------------------------------------------------------------------------
// Element types. Each says how it is stored (`T`), how an f32 result becomes a stored
// value (round to nearest even for the 16-bit floats), which word-to-uniform rule it
// uses, and how dropout scales a kept element (in f32 for the f32-or-narrower types,
// in f64 for f64, as on the CPU).

struct DittoF32 {
    typedef float T;
    static DITTO_HD T from_f32(float x) { return x; }
    static DITTO_HD float uniform(uint32_t w) { return ditto_uniform_f32(w); }
    static DITTO_HD T kept(T x, float scale) { return x * scale; }
};

struct DittoF16 {
    typedef uint16_t T;
    static DITTO_HD T from_f32(float x) { return ditto_f32_to_f16(x); }
    static DITTO_HD float uniform(uint32_t w) { return ditto_f16_to_f32(ditto_uniform_f16(w)); }
    static DITTO_HD T kept(T x, float scale) { return from_f32(ditto_f16_to_f32(x) * scale); }
};

struct DittoBF16 {
    typedef uint16_t T;
    static DITTO_HD T from_f32(float x) { return ditto_f32_to_bf16(x); }
    static DITTO_HD float uniform(uint32_t w) { return ditto_bf16_to_f32(ditto_uniform_bf16(w)); }
    static DITTO_HD T kept(T x, float scale) { return from_f32(ditto_bf16_to_f32(x) * scale); }
};

// f64: bernoulli and dropout only (its uniform uses two words: ditto_uniform_f64_block).
struct DittoF64 {
    typedef double T;
    static DITTO_HD T from_f32(float x) { return (double)x; }
    static DITTO_HD T kept(T x, float scale) { return x * (double)scale; }
};

// u8 and bool (one byte, 0 or 1): only bernoulli writes them.
struct DittoU8 {
    typedef uint8_t T;
    static DITTO_HD T from_f32(float x) { return x != 0.0f ? 1 : 0; }
};

// Blocks of an op on n elements with one word per element: ceil(n / 4), without
// overflowing near 2^64.
DITTO_HD uint64_t ditto_blocks_for(uint64_t n) {
    return n / 4 + (n % 4 != 0 ? 1 : 0);
}

// Blocks of an op on n elements with two words per element: ceil(n / 2).
DITTO_HD uint64_t ditto_blocks_for_pairs(uint64_t n) {
    return n / 2 + (n % 2 != 0 ? 1 : 0);
}

// Packed-mask words (one bit per element, 32 elements = 8 blocks per word).
DITTO_HD uint64_t ditto_mask_words_for(uint64_t n) {
    return n / 32 + (n % 32 != 0 ? 1 : 0);
}

// The stream a kernel captured into a CUDA graph draws from (rng-gen's graph module,
// PyTorch's PhiloxCudaState). Values passed at capture would be frozen, and every replay
// would draw the same numbers; so a captured kernel gets the generator's two device
// words `philox` = {seed, base offset}, which each replay moves on, and its own
// reservation's place in the graph as `*offset`. This replaces (*seed, *offset) by the
// seed and base offset + *offset; with philox == nullptr (an eager launch) they are the
// values the host reserved and stay as they are.
DITTO_HD void ditto_philox_from_words(const uint64_t* philox, uint64_t* seed, uint64_t* offset) {
    if (philox != nullptr) {
        *seed = philox[0];
        *offset = philox[1] + *offset;
    }
}

// ---------------------------------------------------------------------------------
// Loads and stores of a block's elements. The GPU uses 16-byte (or 8- / 4-byte) vector
// accesses when all elements exist and the address is aligned (always, for buffers
// from cudaMalloc); every other case, and the host, goes element by element. Only
// speed depends on the path.

#ifdef __CUDA_ARCH__
DITTO_HD bool ditto_aligned(const void* p, uint64_t bytes) {
    return ((uint64_t)p & (bytes - 1)) == 0;
}
DITTO_HD bool ditto_store_vector(float* p, const float v[4]) {
    if (!ditto_aligned(p, 16)) return false;
    *(float4*)p = make_float4(v[0], v[1], v[2], v[3]);
    return true;
}
DITTO_HD bool ditto_store_vector(uint32_t* p, const uint32_t v[4]) {
    if (!ditto_aligned(p, 16)) return false;
    *(uint4*)p = make_uint4(v[0], v[1], v[2], v[3]);
    return true;
}
DITTO_HD bool ditto_store_vector(uint16_t* p, const uint16_t v[4]) {
    if (!ditto_aligned(p, 8)) return false;
    *(uint2*)p = make_uint2((uint32_t)v[0] | (uint32_t)v[1] << 16,
                            (uint32_t)v[2] | (uint32_t)v[3] << 16);
    return true;
}
DITTO_HD bool ditto_store_vector(uint8_t* p, const uint8_t v[4]) {
    if (!ditto_aligned(p, 4)) return false;
    *(uint32_t*)p = (uint32_t)v[0] | (uint32_t)v[1] << 8 | (uint32_t)v[2] << 16 |
                    (uint32_t)v[3] << 24;
    return true;
}
DITTO_HD bool ditto_store_vector(double* p, const double v[4]) {
    if (!ditto_aligned(p, 16)) return false;
    ((double2*)p)[0] = make_double2(v[0], v[1]);
    ((double2*)p)[1] = make_double2(v[2], v[3]);
    return true;
}
DITTO_HD bool ditto_load_vector(const float* p, float v[4]) {
    if (!ditto_aligned(p, 16)) return false;
    const float4 q = *(const float4*)p;
    v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
    return true;
}
DITTO_HD bool ditto_load_vector(const uint16_t* p, uint16_t v[4]) {
    if (!ditto_aligned(p, 8)) return false;
    const uint2 q = *(const uint2*)p;
    v[0] = (uint16_t)q.x; v[1] = (uint16_t)(q.x >> 16);
    v[2] = (uint16_t)q.y; v[3] = (uint16_t)(q.y >> 16);
    return true;
}
DITTO_HD bool ditto_load_vector(const double* p, double v[4]) {
    if (!ditto_aligned(p, 16)) return false;
    const double2 a = ((const double2*)p)[0], b = ((const double2*)p)[1];
    v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
    return true;
}
// Two-element blocks (8-byte elements): one 16-byte access.
DITTO_HD bool ditto_store_vector2(double* p, const double v[2]) {
    if (!ditto_aligned(p, 16)) return false;
    *(double2*)p = make_double2(v[0], v[1]);
    return true;
}
DITTO_HD bool ditto_store_vector2(int64_t* p, const int64_t v[2]) {
    if (!ditto_aligned(p, 16)) return false;
    *(longlong2*)p = make_longlong2(v[0], v[1]);
    return true;
}
#endif

// Writes elements 4*block .. 4*block+3 of `out` that are below n.
template <class T>
DITTO_HD void ditto_store4(T* out, uint64_t block, uint64_t n, const T v[4]) {
    const uint64_t first = block * 4;
#ifdef __CUDA_ARCH__
    if (first + 4 <= n && ditto_store_vector(out + first, v)) return;
#endif
    for (uint64_t l = 0; l < 4 && first + l < n; ++l) out[first + l] = v[l];
}

// Reads elements 4*block .. 4*block+3 of `in` that are below n (the rest read as 0).
template <class T>
DITTO_HD void ditto_load4(const T* in, uint64_t block, uint64_t n, T v[4]) {
    const uint64_t first = block * 4;
#ifdef __CUDA_ARCH__
    if (first + 4 <= n && ditto_load_vector(in + first, v)) return;
#endif
    for (uint64_t l = 0; l < 4; ++l) v[l] = first + l < n ? in[first + l] : (T)0;
}

// Writes elements 2*block, 2*block+1 of `out` that are below n.
template <class T>
DITTO_HD void ditto_store2(T* out, uint64_t block, uint64_t n, const T v[2]) {
    const uint64_t first = block * 2;
#ifdef __CUDA_ARCH__
    if (first + 2 <= n && ditto_store_vector2(out + first, v)) return;
#endif
    for (uint64_t l = 0; l < 2 && first + l < n; ++l) out[first + l] = v[l];
}

// Elements 4b..4b+3 from their f32 values f, each rounded to the element type.
template <class Out>
DITTO_HD void ditto_store4_f32(typename Out::T* out, uint64_t block, uint64_t n,
                               const float f[4]) {
    typename Out::T v[4];
    for (int l = 0; l < 4; ++l) v[l] = Out::from_f32(f[l]);
    ditto_store4(out, block, n, v);
}

// ---------------------------------------------------------------------------------
// The ops, one block each.

// Raw words: element i is word i.
DITTO_HD void ditto_bits_block(uint64_t seed, uint64_t offset, uint64_t block, uint64_t n,
                               uint32_t* out) {
    uint32_t w[4];
    ditto_block_words(seed, offset + block, w);
    ditto_store4(out, block, n, w);
}

// uniform(low, high): scale_uniform_f32(u, low, high) with u the element type's uniform,
// then rounded to the element type. rand() is low = 0, high = 1, which leaves u exact.
template <class Out>
DITTO_HD void ditto_uniform_block(uint64_t seed, uint64_t offset, uint64_t block, uint64_t n,
                                  float low, float high, typename Out::T* out) {
    uint32_t w[4];
    ditto_block_words(seed, offset + block, w);
    float f[4];
    for (int l = 0; l < 4; ++l) f[l] = ditto_scale_uniform_f32(Out::uniform(w[l]), low, high);
    ditto_store4_f32<Out>(out, block, n, f);
}

// uniform(low, high) in f64: two words per element, elements 2b and 2b+1.
DITTO_HD void ditto_uniform_f64_block(uint64_t seed, uint64_t offset, uint64_t block, uint64_t n,
                                      double low, double high, double* out) {
    uint32_t w[4];
    ditto_block_words(seed, offset + block, w);
    const double v[2] = {ditto_scale_uniform_f64(ditto_uniform_f64(w[0], w[1]), low, high),
                         ditto_scale_uniform_f64(ditto_uniform_f64(w[2], w[3]), low, high)};
    ditto_store2(out, block, n, v);
}

// randint in [low, low + range): two words per element, elements 2b and 2b+1. The sum
// lies in [low, high), so the wrapping unsigned add is the exact result.
DITTO_HD void ditto_randint_block(uint64_t seed, uint64_t offset, uint64_t block, uint64_t n,
                                  int64_t low, uint64_t range, int64_t* out) {
    uint32_t w[4];
    ditto_block_words(seed, offset + block, w);
    const int64_t v[2] = {(int64_t)((uint64_t)low + ditto_below(w[0], w[1], range)),
                          (int64_t)((uint64_t)low + ditto_below(w[2], w[3], range))};
    ditto_store2(out, block, n, v);
}

// normal(mean, std): pairs (w0, w1) and (w2, w3) through Box-Muller give elements
// 4b, 4b+1 (r cos, r sin) and 4b+2, 4b+3; then mean + std * z, rounded.
template <class Out>
DITTO_HD void ditto_normal_block(uint64_t seed, uint64_t offset, uint64_t block, uint64_t n,
                                 float mean, float std_dev, typename Out::T* out) {
    uint32_t w[4];
    ditto_block_words(seed, offset + block, w);
    float z[4];
    ditto_box_muller(w[0], w[1], &z[0], &z[1]);
    ditto_box_muller(w[2], w[3], &z[2], &z[3]);
    for (int l = 0; l < 4; ++l) z[l] = ditto_scale_normal_f32(z[l], mean, std_dev);
    ditto_store4_f32<Out>(out, block, n, z);
}

// bernoulli(p): 1 iff u < p, as 1.0 / 0.0 or as the byte 1 / 0.
template <class Out>
DITTO_HD void ditto_bernoulli_block(uint64_t seed, uint64_t offset, uint64_t block, uint64_t n,
                                    float p, typename Out::T* out) {
    uint32_t w[4];
    ditto_block_words(seed, offset + block, w);
    typename Out::T v[4];
    for (int l = 0; l < 4; ++l) {
        v[l] = Out::from_f32(ditto_bernoulli(w[l], p) ? 1.0f : 0.0f);
    }
    ditto_store4(out, block, n, v);
}

#endif  // DITTO_RANDOM_BLOCKS_CUH
