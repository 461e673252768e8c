// Dropout's CUDA bodies: forward on one block, one packed-mask word, backward from the
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

// The keep bits of one block (bit l for element 4b+l, only elements below n): keep iff
// u >= p. The forward's elements and the packed mask both come from here.
DITTO_HD uint32_t ditto_dropout_keep_bits(uint64_t seed, uint64_t offset, uint64_t block,
                                          uint64_t n, float p) {
    uint32_t w[4];
    ditto_block_words(seed, offset + block, w);
    uint32_t keep = 0;
    for (uint64_t l = 0; l < 4; ++l) {
        if (block * 4 + l < n && ditto_dropout_keep(w[l], p)) keep |= 1u << l;
    }
    return keep;
}

// dropout(p) forward on one block: kept elements scaled, dropped ones +0. Returns the
// block's keep bits.
template <class Out>
DITTO_HD uint32_t ditto_dropout_block(uint64_t seed, uint64_t offset, uint64_t block, uint64_t n,
                                      float p, float scale, const typename Out::T* x,
                                      typename Out::T* y) {
    const uint32_t keep = ditto_dropout_keep_bits(seed, offset, block, n, p);
    ditto_apply_keep_block<Out>(keep, block, n, scale, x, y);
    return keep;
}

// Packed-mask word `word` (elements 32w .. 32w+31, blocks 8w .. 8w+7), bits past n 0.
// The forward kernel writes the mask in a loop of its own, one word per thread, and the
// elements in the usual loop, one block per thread: a thread that wrote a whole word's
// 32 elements would put neighbouring lanes 128 bytes apart (f32), and on an H100 that
// uncoalesced kernel ran five times slower than the maskless one. Computing each
// block's Philox words twice costs far less than that.
DITTO_HD uint32_t ditto_dropout_mask_word(uint64_t seed, uint64_t offset, uint64_t word,
                                          uint64_t n, float p) {
    uint32_t bits = 0;
    for (uint64_t b = 0; b < 8 && (word * 8 + b) * 4 < n; ++b) {
        bits |= ditto_dropout_keep_bits(seed, offset, word * 8 + b, n, p) << (4 * b);
    }
    return bits;
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
