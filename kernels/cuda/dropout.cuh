// Dropout's CUDA bodies: forward on one block or one packed-mask word, backward from the
// packed mask (one of dropout's pieces; crates/rng-gen/src/ops/dropout/mod.rs lists them
// all). The keep rule is ditto_dropout_keep (ditto_math.cuh): keep iff u >= p. Kept
// elements become Out::kept(x, scale), with scale = 1 / (1 - p) computed once on the
// host; dropped ones +0. The packed mask has bit i % 32 of word i / 32 for element i.
#ifndef DITTO_DROPOUT_CUH
#define DITTO_DROPOUT_CUH

#include "random_blocks.cuh"

// Applies a keep pattern (bit l = element 4b+l kept) to one block: kept elements become
// Out::kept(x, scale); dropped ones become +0.
template <class Out>
DITTO_HD void ditto_apply_keep_block(uint32_t keep, uint64_t block, uint64_t n, float scale,
                                     const typename Out::T* x, typename Out::T* y) {
    typename Out::T in[4], v[4];
    ditto_load4(x, block, n, in);
    for (int l = 0; l < 4; ++l) {
        v[l] = ((keep >> l) & 1u) != 0 ? Out::kept(in[l], scale) : Out::from_f32(0.0f);
    }
    ditto_store4(y, block, n, v);
}

// dropout(p) forward on one block: keep iff u >= p. Returns the keep bits of the
// elements below n (bit l for element 4b+l), for the packed mask.
template <class Out>
DITTO_HD uint32_t ditto_dropout_block(uint64_t seed, uint64_t offset, uint64_t block, uint64_t n,
                                      float p, float scale, const typename Out::T* x,
                                      typename Out::T* y) {
    uint32_t w[4];
    ditto_block_words(seed, offset + block, w);
    uint32_t keep = 0;
    for (uint64_t l = 0; l < 4; ++l) {
        if (block * 4 + l < n && ditto_dropout_keep(w[l], p)) keep |= 1u << l;
    }
    ditto_apply_keep_block<Out>(keep, block, n, scale, x, y);
    return keep;
}

// dropout forward on mask word `group` (elements 32g .. 32g+31, blocks 8g .. 8g+7):
// one thread owns the whole word, so the mask needs no atomics. Bits past n are 0.
template <class Out>
DITTO_HD void ditto_dropout_group(uint64_t seed, uint64_t offset, uint64_t group, uint64_t n,
                                  float p, float scale, const typename Out::T* x,
                                  typename Out::T* y, uint32_t* mask) {
    uint32_t word = 0;
    for (uint64_t b = 0; b < 8 && (group * 8 + b) * 4 < n; ++b) {
        word |= ditto_dropout_block<Out>(seed, offset, group * 8 + b, n, p, scale, x, y) << (4 * b);
    }
    mask[group] = word;
}

// dropout backward on one block from the packed mask: grad_in = kept(grad) where kept.
template <class Out>
DITTO_HD void ditto_dropout_backward_mask_block(uint64_t block, uint64_t n, float scale,
                                                const uint32_t* mask,
                                                const typename Out::T* grad,
                                                typename Out::T* grad_in) {
    const uint32_t keep = (mask[block / 8] >> (4 * (block % 8))) & 0xFu;
    ditto_apply_keep_block<Out>(keep, block, n, scale, grad, grad_in);
}

#endif  // DITTO_DROPOUT_CUH
