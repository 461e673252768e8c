// Fused causal self-attention, forward and backward, with attention dropout whose mask is
// a function of the element's coordinates only (docs/contract.md §5.11).
//
// FlashAttention-2's structure: a block owns one (batch, head) and a tile of TILE query
// rows (forward, dQ) or key rows (dK, dV), one thread per row; it walks the other side in
// tiles of TILE rows staged in shared memory. The forward keeps a running maximum and
// sum per query row (the online softmax), so the [t, t] probabilities never reach global
// memory; it saves each row's log-sum-exp, and the backward recomputes every probability
// from it. Unlike FlashAttention-2 the backward is two kernels: dK and dV with a block
// per key tile walking the query tiles, dQ with a block per query tile walking the key
// tiles. Each gradient element is then one thread's sum in a fixed order (queries or keys
// ascending): no atomics, so two runs give the same bits on one GPU model. The cost is
// computing the probabilities once more than FlashAttention-2's single backward kernel.
//
// Dropout. Element (b, h, i, j) of the [batch, heads, t, t] probabilities is element
//     e = ((row(b) * heads + h) * t + i) * t + j
// of the dropout op's stream at the reservation (seed, offset): kept iff the f32 uniform
// of word e, lane e % 4 of Philox block offset + e / 4, is >= p (dropout.cuh's rule),
// where row(b) is the batch entry's row in the global batch (`rows`, or b itself). That
// is exactly the word the unfused path's dropout of the probabilities draws, so the two
// paths keep the same elements, and nothing about the tiles, the grid or the GPU enters
// it (FlashAttention's own dropout draws by launch layout).
//
// CUDA graphs. The forward and the two backward kernels that regenerate the mask take
// the generator's device words `philox` after the problem: nullptr for an eager launch,
// whose (seed, offset) are values in the problem; in a launch captured into a graph the
// problem's offset is the reservation's place within the graph, and the seed and base
// offset come from the words (ditto_philox_from_words), so each replay draws the mask
// the same launch made eagerly at that point would draw.
//
// Grid: x = batch * heads (one (b, h) per block column), y = tiles of t, TILE threads per
// block. The row-dot kernel is a grid-stride loop over the [batch, heads, t] rows.
//
// Layouts: q, k and v are read through DittoHeadStrides (element (b, h, i, d) at b * b_
// + h * h_ + i * t_ + d), so the heads of a fused qkv projection are read in place. The
// outputs (out, dq, dk, dv) are [batch, t, heads, d] contiguous: merged heads, rows of
// the width. lse and delta are [batch, heads, t] f32.
//
// f32 only, head widths up to DITTO_ATTENTION_MAX_D (64: GPT-2's heads at every size,
// nanoGPT's recipes; its tiles then fit the 48 KiB of static shared memory). Compiled by NVRTC with --fmad=false
// like every ditto kernel; in its own translation unit because it synchronises blocks
// (the CUDA stand-in runs such units' blocks as fibers).
#include "dropout.cuh"

#define DITTO_ATTENTION_MAX_D 64

// The problem: sizes, the softmax scale, and the dropout reservation.
struct DittoAttention {
    uint64_t batch, heads, t, d;
    uint64_t seed, offset;  // the dropout op's reservation (unused without dropout;
                            // with `philox` words, offset counts from the graph's start)
    float scale;            // of the scores q . k, already rounded to f32
    float p;                // drop probability
    float keep_scale;       // 1 / (1 - p), computed on the host as dropout's
    int32_t dropout;        // 0: no dropout (evaluation), the probabilities as they are
};

// Element strides of a [batch, heads, t, d] operand whose last dimension is contiguous.
struct DittoHeadStrides {
    uint64_t b, h, t;
};

DITTO_HD uint64_t ditto_head_index(DittoHeadStrides s, uint64_t b, uint64_t h, uint64_t i) {
    return b * s.b + h * s.h + i * s.t;
}

// Row i of (b, h) in the [batch, t, heads, d] outputs.
DITTO_HD uint64_t ditto_merged_index(const DittoAttention& a, uint64_t b, uint64_t h, uint64_t i) {
    return ((b * a.t + i) * a.heads + h) * a.d;
}

// The Philox block behind the last keep decision, so a row's consecutive keys compute
// each block once.
struct DittoKeepCache {
    uint64_t block;
    uint32_t words[4];
};

// Whether the dropout keeps stream element e (the header's rule).
DITTO_HD bool ditto_attention_keeps(const DittoAttention& a, uint64_t e, DittoKeepCache& cache) {
    const uint64_t block = e / 4;
    if (block != cache.block) {
        ditto_block_words(a.seed, a.offset + block, cache.words);
        cache.block = block;
    }
    return ditto_dropout_keep(cache.words[e % 4], a.p);
}

// Stream element of (b, h, i, 0): keys add j.
DITTO_HD uint64_t ditto_attention_row_element(const DittoAttention& a, const uint64_t* rows,
                                              uint64_t b, uint64_t h, uint64_t i) {
    const uint64_t row = rows != nullptr ? rows[b] : b;
    return ((row * a.heads + h) * a.t + i) * a.t;
}

// Copies rows r0 .. r0 + TILE of an operand's (b, h) into a [TILE][W] shared tile (zeros
// past t and past d), all threads of the block sharing the work.
template <int TILE, int W>
__device__ void ditto_attention_stage(const DittoAttention& a, const float* x, DittoHeadStrides s,
                                      uint64_t b, uint64_t h, uint64_t r0, float (*tile)[W]) {
    for (uint64_t e = threadIdx.x; e < (uint64_t)TILE * DITTO_ATTENTION_MAX_D; e += blockDim.x) {
        const uint64_t r = e / DITTO_ATTENTION_MAX_D, c = e % DITTO_ATTENTION_MAX_D;
        const bool inside = r0 + r < a.t && c < a.d;
        tile[r][c] = inside ? x[ditto_head_index(s, b, h, r0 + r) + c] : 0.0f;
    }
}

// x . y over the head width (the sum in d order).
DITTO_HD float ditto_attention_dot(const DittoAttention& a, const float* x, const float* y) {
    float sum = 0.0f;
    for (uint64_t c = 0; c < a.d; ++c) sum += x[c] * y[c];
    return sum;
}

#define DITTO_ATTENTION_TILE 32
#define DITTO_NEG_INF ditto_f32_from_bits(0xff800000u)

// One query row per thread: out = softmax(q k^T scale, causal) with dropout, times v.
extern "C" __global__ void ditto_attention_forward_f32(DittoAttention a, const uint64_t* philox,
                                                       const uint64_t* rows,
                                                       const float* q, DittoHeadStrides qs,
                                                       const float* k, DittoHeadStrides ks,
                                                       const float* v, DittoHeadStrides vs,
                                                       float* out, float* lse) {
    const int TILE = DITTO_ATTENTION_TILE, MAX_D = DITTO_ATTENTION_MAX_D;
    __shared__ float q_tile[DITTO_ATTENTION_TILE][DITTO_ATTENTION_MAX_D + 1];
    __shared__ float k_tile[DITTO_ATTENTION_TILE][DITTO_ATTENTION_MAX_D];
    __shared__ float v_tile[DITTO_ATTENTION_TILE][DITTO_ATTENTION_MAX_D];
    ditto_philox_from_words(philox, &a.seed, &a.offset);
    const uint64_t b = blockIdx.x / a.heads, h = blockIdx.x % a.heads;
    const uint64_t i0 = (uint64_t)blockIdx.y * TILE, i = i0 + threadIdx.x;
    const bool live = i < a.t;
    ditto_attention_stage<DITTO_ATTENTION_TILE, DITTO_ATTENTION_MAX_D + 1>(a, q, qs, b, h, i0, q_tile);
    const float* q_row = q_tile[threadIdx.x];
    float acc[MAX_D];
    for (int c = 0; c < MAX_D; ++c) acc[c] = 0.0f;
    float m = DITTO_NEG_INF, l = 0.0f;
    const uint64_t element = live ? ditto_attention_row_element(a, rows, b, h, i) : 0;
    DittoKeepCache cache = {~0ull, {0, 0, 0, 0}};
    const uint64_t last_key = (i0 + TILE < a.t ? i0 + TILE : a.t);  // keys this block needs
    for (uint64_t j0 = 0; j0 < last_key; j0 += TILE) {
        __syncthreads();
        ditto_attention_stage<DITTO_ATTENTION_TILE, DITTO_ATTENTION_MAX_D>(a, k, ks, b, h, j0, k_tile);
        ditto_attention_stage<DITTO_ATTENTION_TILE, DITTO_ATTENTION_MAX_D>(a, v, vs, b, h, j0, v_tile);
        __syncthreads();
        if (!live || i < j0) continue;
        const uint64_t keys = (i - j0 + 1 < (uint64_t)TILE) ? i - j0 + 1 : TILE;
        float s[DITTO_ATTENTION_TILE];
        float tile_max = DITTO_NEG_INF;
        for (uint64_t jj = 0; jj < keys; ++jj) {
            s[jj] = ditto_attention_dot(a, q_row, k_tile[jj]) * a.scale;
            tile_max = s[jj] > tile_max ? s[jj] : tile_max;
        }
        const float m_new = tile_max > m ? tile_max : m;
        const float correction = expf(m - m_new);  // 0 for the first tile
        l *= correction;
        for (uint64_t c = 0; c < a.d; ++c) acc[c] *= correction;
        for (uint64_t jj = 0; jj < keys; ++jj) {
            const float prob = expf(s[jj] - m_new);
            l += prob;
            float weight = prob;
            if (a.dropout) weight = ditto_attention_keeps(a, element + j0 + jj, cache) ? prob * a.keep_scale : 0.0f;
            for (uint64_t c = 0; c < a.d; ++c) acc[c] += weight * v_tile[jj][c];
        }
        m = m_new;
    }
    if (!live) return;
    float* o = out + ditto_merged_index(a, b, h, i);
    for (uint64_t c = 0; c < a.d; ++c) o[c] = acc[c] / l;
    lse[(b * a.heads + h) * a.t + i] = m + logf(l);
}

// delta_i = dO_i . O_i, the row sums the backward subtracts (with dropout too: the sum of
// dP * P over a row equals dO . O).
extern "C" __global__ void ditto_attention_row_dot_f32(DittoAttention a, const float* d_out,
                                                       DittoHeadStrides ds, const float* out,
                                                       float* delta) {
    const uint64_t rows = a.batch * a.heads * a.t;
    for (uint64_t r = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows;
         r += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t i = r % a.t, bh = r / a.t, h = bh % a.heads, b = bh / a.heads;
        delta[r] = ditto_attention_dot(a, d_out + ditto_head_index(ds, b, h, i),
                                                              out + ditto_merged_index(a, b, h, i));
    }
}

// The gradient of one score: from the recomputed probability, the upstream dO_i . v_j,
// the row's delta and the keep decision. `weight` gets the dropped-out probability (what
// multiplied v_j in the forward).
DITTO_HD float ditto_attention_score_grad(const DittoAttention& a, float prob, float d_prob_dropped,
                                          float delta, bool kept, float* weight) {
    float d_prob = d_prob_dropped;
    *weight = prob;
    if (a.dropout) {
        d_prob = kept ? d_prob_dropped * a.keep_scale : 0.0f;
        *weight = kept ? prob * a.keep_scale : 0.0f;
    }
    return prob * (d_prob - delta) * a.scale;
}

// One query row per thread: dQ_i = sum over keys j <= i of dS_ij k_j, keys ascending.
extern "C" __global__ void ditto_attention_backward_dq_f32(
    DittoAttention a, const uint64_t* philox, const uint64_t* rows, const float* q,
    DittoHeadStrides qs, const float* k, DittoHeadStrides ks, const float* v,
    DittoHeadStrides vs, const float* d_out, DittoHeadStrides ds, const float* lse,
    const float* delta, float* dq) {
    const int TILE = DITTO_ATTENTION_TILE, MAX_D = DITTO_ATTENTION_MAX_D;
    __shared__ float q_tile[DITTO_ATTENTION_TILE][DITTO_ATTENTION_MAX_D + 1];
    __shared__ float do_tile[DITTO_ATTENTION_TILE][DITTO_ATTENTION_MAX_D + 1];
    __shared__ float k_tile[DITTO_ATTENTION_TILE][DITTO_ATTENTION_MAX_D];
    __shared__ float v_tile[DITTO_ATTENTION_TILE][DITTO_ATTENTION_MAX_D];
    ditto_philox_from_words(philox, &a.seed, &a.offset);
    const uint64_t b = blockIdx.x / a.heads, h = blockIdx.x % a.heads;
    const uint64_t i0 = (uint64_t)blockIdx.y * TILE, i = i0 + threadIdx.x;
    const bool live = i < a.t;
    ditto_attention_stage<DITTO_ATTENTION_TILE, DITTO_ATTENTION_MAX_D + 1>(a, q, qs, b, h, i0, q_tile);
    ditto_attention_stage<DITTO_ATTENTION_TILE, DITTO_ATTENTION_MAX_D + 1>(a, d_out, ds, b, h, i0, do_tile);
    const uint64_t r = (b * a.heads + h) * a.t + i;
    const float row_lse = live ? lse[r] : 0.0f, row_delta = live ? delta[r] : 0.0f;
    const uint64_t element = live ? ditto_attention_row_element(a, rows, b, h, i) : 0;
    DittoKeepCache cache = {~0ull, {0, 0, 0, 0}};
    float acc[MAX_D];
    for (int c = 0; c < MAX_D; ++c) acc[c] = 0.0f;
    const uint64_t last_key = (i0 + TILE < a.t ? i0 + TILE : a.t);
    for (uint64_t j0 = 0; j0 < last_key; j0 += TILE) {
        __syncthreads();
        ditto_attention_stage<DITTO_ATTENTION_TILE, DITTO_ATTENTION_MAX_D>(a, k, ks, b, h, j0, k_tile);
        ditto_attention_stage<DITTO_ATTENTION_TILE, DITTO_ATTENTION_MAX_D>(a, v, vs, b, h, j0, v_tile);
        __syncthreads();
        if (!live || i < j0) continue;
        const uint64_t keys = (i - j0 + 1 < (uint64_t)TILE) ? i - j0 + 1 : TILE;
        for (uint64_t jj = 0; jj < keys; ++jj) {
            const float prob = expf(ditto_attention_dot(a, q_tile[threadIdx.x], k_tile[jj]) * a.scale - row_lse);
            const float upstream = ditto_attention_dot(a, do_tile[threadIdx.x], v_tile[jj]);
            const bool kept = a.dropout && ditto_attention_keeps(a, element + j0 + jj, cache);
            float weight;
            const float d_score = ditto_attention_score_grad(a, prob, upstream, row_delta, kept, &weight);
            for (uint64_t c = 0; c < a.d; ++c) acc[c] += d_score * k_tile[jj][c];
        }
    }
    if (!live) return;
    float* out = dq + ditto_merged_index(a, b, h, i);
    for (uint64_t c = 0; c < a.d; ++c) out[c] = acc[c];
}

// One key row per thread: dK_j = sum over queries i >= j of dS_ij q_i and dV_j = sum of
// the dropped-out probability times dO_i, queries ascending.
extern "C" __global__ void ditto_attention_backward_dkv_f32(
    DittoAttention a, const uint64_t* philox, const uint64_t* rows, const float* q,
    DittoHeadStrides qs, const float* k, DittoHeadStrides ks, const float* v,
    DittoHeadStrides vs, const float* d_out, DittoHeadStrides ds, const float* lse,
    const float* delta, float* dk, float* dv) {
    const int TILE = DITTO_ATTENTION_TILE, MAX_D = DITTO_ATTENTION_MAX_D;
    __shared__ float k_tile[DITTO_ATTENTION_TILE][DITTO_ATTENTION_MAX_D + 1];
    __shared__ float v_tile[DITTO_ATTENTION_TILE][DITTO_ATTENTION_MAX_D + 1];
    __shared__ float q_tile[DITTO_ATTENTION_TILE][DITTO_ATTENTION_MAX_D];
    __shared__ float do_tile[DITTO_ATTENTION_TILE][DITTO_ATTENTION_MAX_D];
    __shared__ float lse_tile[DITTO_ATTENTION_TILE];
    __shared__ float delta_tile[DITTO_ATTENTION_TILE];
    ditto_philox_from_words(philox, &a.seed, &a.offset);
    const uint64_t b = blockIdx.x / a.heads, h = blockIdx.x % a.heads;
    const uint64_t j0 = (uint64_t)blockIdx.y * TILE, j = j0 + threadIdx.x;
    const bool live = j < a.t;
    ditto_attention_stage<DITTO_ATTENTION_TILE, DITTO_ATTENTION_MAX_D + 1>(a, k, ks, b, h, j0, k_tile);
    ditto_attention_stage<DITTO_ATTENTION_TILE, DITTO_ATTENTION_MAX_D + 1>(a, v, vs, b, h, j0, v_tile);
    DittoKeepCache cache = {~0ull, {0, 0, 0, 0}};
    float d_key[MAX_D], d_value[MAX_D];
    for (int c = 0; c < MAX_D; ++c) d_key[c] = d_value[c] = 0.0f;
    for (uint64_t i0 = j0; i0 < a.t; i0 += TILE) {  // queries before j0 see none of these keys
        __syncthreads();
        ditto_attention_stage<DITTO_ATTENTION_TILE, DITTO_ATTENTION_MAX_D>(a, q, qs, b, h, i0, q_tile);
        ditto_attention_stage<DITTO_ATTENTION_TILE, DITTO_ATTENTION_MAX_D>(a, d_out, ds, b, h, i0, do_tile);
        for (uint64_t e = threadIdx.x; e < (uint64_t)TILE; e += blockDim.x) {
            const uint64_t r = (b * a.heads + h) * a.t + i0 + e;
            lse_tile[e] = i0 + e < a.t ? lse[r] : 0.0f;
            delta_tile[e] = i0 + e < a.t ? delta[r] : 0.0f;
        }
        __syncthreads();
        if (!live) continue;
        for (uint64_t ii = 0; ii < (uint64_t)TILE && i0 + ii < a.t; ++ii) {
            const uint64_t i = i0 + ii;
            if (i < j) continue;
            const float prob = expf(ditto_attention_dot(a, q_tile[ii], k_tile[threadIdx.x]) * a.scale - lse_tile[ii]);
            const float upstream = ditto_attention_dot(a, do_tile[ii], v_tile[threadIdx.x]);
            const bool kept = a.dropout && ditto_attention_keeps(a, ditto_attention_row_element(a, rows, b, h, i) + j, cache);
            float weight;
            const float d_score = ditto_attention_score_grad(a, prob, upstream, delta_tile[ii], kept, &weight);
            for (uint64_t c = 0; c < a.d; ++c) {
                d_key[c] += d_score * q_tile[ii][c];
                d_value[c] += weight * do_tile[ii][c];
            }
        }
    }
    if (!live) return;
    const uint64_t at = ditto_merged_index(a, b, h, j);
    for (uint64_t c = 0; c < a.d; ++c) {
        dk[at + c] = d_key[c];
        dv[at + c] = d_value[c];
    }
}
