// The CUDA headers compiled for the host, behind a C ABI for the Rust parity tests
// (kernels::host_parity). Nothing here re-implements anything: each wrapper calls the
// __host__ __device__ function the kernels call, so the tests check GPU code itself.
//
// Built by crates/kernels/build.rs (feature `host-parity`) with -ffp-contract=off: every float
// operation is a separate, correctly rounded SSE instruction, like the GPU's with
// --fmad=false and like Rust's.
#include <cfloat>
#include <cstddef>

#include "random_blocks.cuh"
#include "dropout.cuh"

static_assert(FLT_EVAL_METHOD == 0, "f32 arithmetic must happen in f32 (SSE), not x87");
static_assert(sizeof(float) == 4 && sizeof(bool) == 1, "the Rust side assumes these");

extern "C" {

// ---- Philox ----------------------------------------------------------------------
void ditto_host_philox(const uint32_t counter[4], uint32_t k0, uint32_t k1, uint32_t out[4]) {
    for (int i = 0; i < 4; ++i) out[i] = counter[i];
    ditto_philox4x32_10(out, k0, k1);
}

void ditto_host_block_words(uint64_t seed, uint64_t block, uint32_t out[4]) {
    ditto_block_words(seed, block, out);
}

// ---- conversions -------------------------------------------------------------------
uint16_t ditto_host_f32_to_f16(float x) { return ditto_f32_to_f16(x); }
float ditto_host_f16_to_f32(uint16_t h) { return ditto_f16_to_f32(h); }
uint16_t ditto_host_f32_to_bf16(float x) { return ditto_f32_to_bf16(x); }
float ditto_host_bf16_to_f32(uint16_t b) { return ditto_bf16_to_f32(b); }
float ditto_host_uniform_f32(uint32_t w) { return ditto_uniform_f32(w); }
uint16_t ditto_host_uniform_f16(uint32_t w) { return ditto_uniform_f16(w); }
uint16_t ditto_host_uniform_bf16(uint32_t w) { return ditto_uniform_bf16(w); }
float ditto_host_open_uniform_f32(uint32_t w) { return ditto_open_uniform_f32(w); }
float ditto_host_scale_uniform_f32(float u, float low, float high) {
    return ditto_scale_uniform_f32(u, low, high);
}
float ditto_host_scale_normal_f32(float z, float mean, float std_dev) {
    return ditto_scale_normal_f32(z, mean, std_dev);
}
bool ditto_host_bernoulli(uint32_t w, float p) { return ditto_bernoulli(w, p); }
bool ditto_host_dropout_keep(uint32_t w, float p) { return ditto_dropout_keep(w, p); }

// ---- f32 math ---------------------------------------------------------------------
float ditto_host_ln(float x) { return ditto_ln(x); }
void ditto_host_sincospi(float x, float* s, float* c) { ditto_sincospi(x, s, c); }
void ditto_host_box_muller(uint32_t w0, uint32_t w1, float* z0, float* z1) {
    ditto_box_muller(w0, w1, z0, z1);
}
// Bulk versions, so exhaustive comparisons do not pay a call per value.
void ditto_host_ln_many(const float* x, float* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = ditto_ln(x[i]);
}
void ditto_host_sincospi_many(const float* x, float* s, float* c, size_t n) {
    for (size_t i = 0; i < n; ++i) ditto_sincospi(x[i], &s[i], &c[i]);
}

// ---- one block of each kernel ---------------------------------------------------------
// `out` (and `x`, `y`, `grad`...) point at the op's whole n-element buffer, exactly as
// the kernel gets it; the call writes elements 4*block .. 4*block+3 below n.
void ditto_host_bits_block(uint64_t seed, uint64_t offset, uint64_t block, uint64_t n,
                           uint32_t* out) {
    ditto_bits_block(seed, offset, block, n, out);
}

// One packed dropout-mask word (dtype independent).
uint32_t ditto_host_dropout_mask_word(uint64_t seed, uint64_t offset, uint64_t word, uint64_t n,
                                      float p) {
    return ditto_dropout_mask_word(seed, offset, word, n, p);
}

// uniform and normal: f32, f16, bf16.
#define DITTO_HOST_SAMPLE_OPS(suffix, Out)                                                    \
    void ditto_host_uniform_block_##suffix(uint64_t seed, uint64_t offset, uint64_t block,   \
                                           uint64_t n, float low, float high, Out::T* out) { \
        ditto_uniform_block<Out>(seed, offset, block, n, low, high, out);                    \
    }                                                                                        \
    void ditto_host_normal_block_##suffix(uint64_t seed, uint64_t offset, uint64_t block,    \
                                          uint64_t n, float mean, float std_dev,             \
                                          Out::T* out) {                                     \
        ditto_normal_block<Out>(seed, offset, block, n, mean, std_dev, out);                 \
    }
DITTO_HOST_SAMPLE_OPS(f32, DittoF32)
DITTO_HOST_SAMPLE_OPS(f16, DittoF16)
DITTO_HOST_SAMPLE_OPS(bf16, DittoBF16)

// bernoulli and dropout: f32, f16, bf16, f64.
#define DITTO_HOST_ELEMENTWISE_OPS(suffix, Out)                                              \
    void ditto_host_bernoulli_block_##suffix(uint64_t seed, uint64_t offset, uint64_t block, \
                                             uint64_t n, float p, Out::T* out) {             \
        ditto_bernoulli_block<Out>(seed, offset, block, n, p, out);                          \
    }                                                                                        \
    uint32_t ditto_host_dropout_block_##suffix(uint64_t seed, uint64_t offset, uint64_t block, \
                                               uint64_t n, float p, float scale,             \
                                               const Out::T* x, Out::T* y) {                 \
        return ditto_dropout_block<Out>(seed, offset, block, n, p, scale, x, y);             \
    }                                                                                        \
    void ditto_host_dropout_backward_mask_block_##suffix(uint64_t block, uint64_t n,         \
                                                         float scale, const uint32_t* mask,  \
                                                         const Out::T* grad,                 \
                                                         Out::T* grad_in) {                  \
        ditto_dropout_backward_mask_block<Out>(block, n, scale, mask, grad, grad_in);        \
    }
DITTO_HOST_ELEMENTWISE_OPS(f32, DittoF32)
DITTO_HOST_ELEMENTWISE_OPS(f16, DittoF16)
DITTO_HOST_ELEMENTWISE_OPS(bf16, DittoBF16)
DITTO_HOST_ELEMENTWISE_OPS(f64, DittoF64)

// Two words per element.
void ditto_host_uniform_f64_block(uint64_t seed, uint64_t offset, uint64_t block, uint64_t n,
                                  double low, double high, double* out) {
    ditto_uniform_f64_block(seed, offset, block, n, low, high, out);
}
void ditto_host_randint_block(uint64_t seed, uint64_t offset, uint64_t block, uint64_t n,
                              int64_t low, uint64_t range, int64_t* out) {
    ditto_randint_block(seed, offset, block, n, low, range, out);
}
double ditto_host_uniform_f64(uint32_t w0, uint32_t w1) { return ditto_uniform_f64(w0, w1); }
uint64_t ditto_host_below(uint32_t w0, uint32_t w1, uint64_t range) {
    return ditto_below(w0, w1, range);
}

void ditto_host_bernoulli_block_u8(uint64_t seed, uint64_t offset, uint64_t block, uint64_t n,
                                   float p, uint8_t* out) {
    ditto_bernoulli_block<DittoU8>(seed, offset, block, n, p, out);
}

}  // extern "C"
