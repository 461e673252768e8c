// Gumbel noise, one Philox block at a time: the CUDA body of the example random op in
// gumbel.rs (docs/custom-random-op.md). It includes ditto's headers the way any
// downstream kernel can: the engine (philox.cuh), the word-to-number rules and ditto's
// own ln (ditto_math.cuh), and the block helpers (random_blocks.cuh). The same function
// runs on the GPU (gumbel.cu, compiled by NVRTC) and on the host (the downstream crate's
// host-parity test), so the two can be compared bit for bit with the Rust body.
#ifndef EXAMPLE_GUMBEL_CUH
#define EXAMPLE_GUMBEL_CUH

#include "random_blocks.cuh"

// u in (0, 1), never 0 or 1: the top 24 bits of the word, centred in their interval.
DITTO_HD float gumbel_open_uniform(uint32_t word) {
    return (float)(word >> 8) * ditto_f32_from_bits(0x33800000u)  // 2^-24
           + ditto_f32_from_bits(0x33000000u);                     // 2^-25
}

// loc - scale * ln(-ln(u)): one word per element, elements 4b .. 4b+3 of block b.
DITTO_HD void gumbel_block(uint64_t seed, uint64_t offset, uint64_t block, uint64_t n,
                           float loc, float scale, float* out) {
    uint32_t w[4];
    ditto_block_words(seed, offset + block, w);
    float v[4];
    for (int l = 0; l < 4; ++l) {
        const float inner = -ditto_ln(gumbel_open_uniform(w[l]));
        const float scaled = scale * ditto_ln(inner);
        v[l] = loc - scaled;
    }
    ditto_store4(out, block, n, v);
}

#endif  // EXAMPLE_GUMBEL_CUH
