// ditto's random kernels: thin grid-stride loops over the per-block bodies of
// random_blocks.cuh. Each thread computes whole Philox blocks (four elements, or two
// for the two-word f64 uniform and randint) and, for a packed dropout mask, whole mask
// words (eight blocks), so no element depends on the grid or block size and no atomics
// are needed.
//
// Arguments are plain values: the generator's (seed, offset) reservation happens on the
// host before the launch (docs/contract.md §7). Every kernel's signature is (seed,
// offset, n, parameters..., out), the output pointer last (crates/kernels/src/launch/mod.rs
// pushes them in that order). Element counts and indices are 64-bit.
// f16 / bf16 buffers are passed as their uint16 bit patterns.
// Kernel names are ditto_<op>_<dtype>_kernel (the op's math keeps the plain names).
// Compiled by NVRTC with --fmad=false (crates/kernels/src/nvrtc.rs).
#include "random_blocks.cuh"
#include "dropout.cuh"

// for (uint64_t var = global thread id; var < count; var += total threads)
#define DITTO_GRID_STRIDE(var, count)                                              \
    for (uint64_t var = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; var < (count); \
         var += (uint64_t)gridDim.x * blockDim.x)

extern "C" __global__ void ditto_bits_u32_kernel(uint64_t seed, uint64_t offset, uint64_t n,
                                                 uint32_t* out) {
    DITTO_GRID_STRIDE(b, ditto_blocks_for(n)) ditto_bits_block(seed, offset, b, n, out);
}

// uniform(low, high) and normal(mean, std) of element type Out: the op's two float
// parameters, four elements per block.
#define DITTO_TWO_FLOAT_KERNEL(name, op_block, Out)                                     \
    extern "C" __global__ void name(uint64_t seed, uint64_t offset, uint64_t n, float a,  \
                                    float b, Out::T* out) {                             \
        DITTO_GRID_STRIDE(block, ditto_blocks_for(n))                                   \
        op_block<Out>(seed, offset, block, n, a, b, out);                               \
    }
DITTO_TWO_FLOAT_KERNEL(ditto_uniform_f32_kernel, ditto_uniform_block, DittoF32)
DITTO_TWO_FLOAT_KERNEL(ditto_uniform_f16_kernel, ditto_uniform_block, DittoF16)
DITTO_TWO_FLOAT_KERNEL(ditto_uniform_bf16_kernel, ditto_uniform_block, DittoBF16)

// Two words per element: thread work items are blocks of two elements.
extern "C" __global__ void ditto_uniform_f64_kernel(uint64_t seed, uint64_t offset,
                                                    uint64_t n, double low, double high,
                                                    double* out) {
    DITTO_GRID_STRIDE(b, ditto_blocks_for_pairs(n))
    ditto_uniform_f64_block(seed, offset, b, n, low, high, out);
}

extern "C" __global__ void ditto_randint_i64_kernel(uint64_t seed, uint64_t offset,
                                                    uint64_t n, int64_t low, uint64_t range,
                                                    int64_t* out) {
    DITTO_GRID_STRIDE(b, ditto_blocks_for_pairs(n))
    ditto_randint_block(seed, offset, b, n, low, range, out);
}

DITTO_TWO_FLOAT_KERNEL(ditto_normal_f32_kernel, ditto_normal_block, DittoF32)
DITTO_TWO_FLOAT_KERNEL(ditto_normal_f16_kernel, ditto_normal_block, DittoF16)
DITTO_TWO_FLOAT_KERNEL(ditto_normal_bf16_kernel, ditto_normal_block, DittoBF16)

#define DITTO_BERNOULLI_KERNEL(name, Out)                                                  \
    extern "C" __global__ void name(uint64_t seed, uint64_t offset, uint64_t n, float p,   \
                                    Out::T* out) {                                         \
        DITTO_GRID_STRIDE(b, ditto_blocks_for(n))                                          \
        ditto_bernoulli_block<Out>(seed, offset, b, n, p, out);                            \
    }
DITTO_BERNOULLI_KERNEL(ditto_bernoulli_f32_kernel, DittoF32)
DITTO_BERNOULLI_KERNEL(ditto_bernoulli_f16_kernel, DittoF16)
DITTO_BERNOULLI_KERNEL(ditto_bernoulli_bf16_kernel, DittoBF16)
DITTO_BERNOULLI_KERNEL(ditto_bernoulli_f64_kernel, DittoF64)
DITTO_BERNOULLI_KERNEL(ditto_bernoulli_u8_kernel, DittoU8)

// Forward: y = dropout(x), one block per thread. With a mask (1 bit per element, bit i
// of word i / 32; mask == nullptr for none) a second loop writes it, one word per
// thread (ditto_dropout_mask_word says why not together).
#define DITTO_DROPOUT_BODY(Out)                                                              \
    DITTO_GRID_STRIDE(b, ditto_blocks_for(n))                                                \
    ditto_dropout_block<Out>(seed, offset, b, n, p, scale, x, y);                            \
    if (mask != nullptr) {                                                                   \
        DITTO_GRID_STRIDE(w, ditto_mask_words_for(n))                                        \
        mask[w] = ditto_dropout_mask_word(seed, offset, w, n, p);                            \
    }
#define DITTO_DROPOUT_KERNEL(name, Out)                                                      \
    extern "C" __global__ void name(uint64_t seed, uint64_t offset, uint64_t n, float p,     \
                                    float scale, const Out::T* x, uint32_t* mask,            \
                                    Out::T* y) {                                             \
        DITTO_DROPOUT_BODY(Out)                                                              \
    }
DITTO_DROPOUT_KERNEL(ditto_dropout_f32_kernel, DittoF32)
DITTO_DROPOUT_KERNEL(ditto_dropout_f16_kernel, DittoF16)
DITTO_DROPOUT_KERNEL(ditto_dropout_bf16_kernel, DittoBF16)
DITTO_DROPOUT_KERNEL(ditto_dropout_f64_kernel, DittoF64)

// ---- CUDA graphs (rng-gen's graph module, PyTorch's PhiloxCudaState) ----
// Inside a captured graph a kernel cannot take (seed, offset) as values: they would be
// frozen at capture and every replay would draw the same numbers. Its twin here reads
// them from the generator's two device words `philox` = {seed, base offset} instead, plus
// the offset of its own reservation within the graph, `intra_offset`
// (ditto_philox_from_words); a replay moves the base offset (ditto_philox_advance_kernel
// at the graph's end), so each replay draws the next stretch of the stream, exactly the
// numbers eager launches would have drawn.
#define DITTO_DROPOUT_GRAPHED_KERNEL(name, Out)                                               \
    extern "C" __global__ void name(const uint64_t* philox, uint64_t intra_offset, uint64_t n, \
                                    float p, float scale, const Out::T* x, uint32_t* mask,    \
                                    Out::T* y) {                                              \
        uint64_t seed = 0, offset = intra_offset;                                             \
        ditto_philox_from_words(philox, &seed, &offset);                                      \
        DITTO_DROPOUT_BODY(Out)                                                               \
    }
DITTO_DROPOUT_GRAPHED_KERNEL(ditto_dropout_graphed_f32_kernel, DittoF32)
DITTO_DROPOUT_GRAPHED_KERNEL(ditto_dropout_graphed_f16_kernel, DittoF16)
DITTO_DROPOUT_GRAPHED_KERNEL(ditto_dropout_graphed_bf16_kernel, DittoBF16)
DITTO_DROPOUT_GRAPHED_KERNEL(ditto_dropout_graphed_f64_kernel, DittoF64)

// The last node of a graph that drew random numbers: moves the generator's device base
// offset past everything the graph reserved (wrapping modulo 2^64, like the host's).
extern "C" __global__ void ditto_philox_advance_kernel(uint64_t* philox, uint64_t increment) {
    if (blockIdx.x == 0 && threadIdx.x == 0) philox[1] += increment;
}

// Backward: grad_in = grad * scale where the element was kept, else 0; the keep pattern
// comes from the packed mask, or (mask == nullptr) is regenerated from (seed, offset, p).
#define DITTO_DROPOUT_BACKWARD_KERNEL(name, Out)                                              \
    extern "C" __global__ void name(uint64_t seed, uint64_t offset, uint64_t n, float p,      \
                                    float scale, const uint32_t* mask, const Out::T* grad,    \
                                    Out::T* grad_in) {                                        \
        DITTO_GRID_STRIDE(b, ditto_blocks_for(n)) {                                           \
            if (mask != nullptr) {                                                            \
                ditto_dropout_backward_mask_block<Out>(b, n, scale, mask, grad, grad_in);     \
            } else {                                                                          \
                ditto_dropout_block<Out>(seed, offset, b, n, p, scale, grad, grad_in);        \
            }                                                                                 \
        }                                                                                     \
    }
DITTO_DROPOUT_BACKWARD_KERNEL(ditto_dropout_backward_f32_kernel, DittoF32)
DITTO_DROPOUT_BACKWARD_KERNEL(ditto_dropout_backward_f16_kernel, DittoF16)
DITTO_DROPOUT_BACKWARD_KERNEL(ditto_dropout_backward_bf16_kernel, DittoBF16)
DITTO_DROPOUT_BACKWARD_KERNEL(ditto_dropout_backward_f64_kernel, DittoF64)
