// The row kernels of the transformer ops: layer norm and the causal softmax of attention,
// forward and backward, with a block of threads per row (32 by default: one warp).
//
// Why a block per row. With a thread per row, the 32 threads of a warp walk 32 different
// rows, so every load touches 32 cache lines, and a GPT's 16,384 rows are too few threads
// to fill an H100. Here a block reads and writes its row together (consecutive threads,
// consecutive elements) and computes every per-element term in parallel.
//
// Why the adds stay in order. Every row sum follows the contract's blocked f64 order
// (docs/contract.md §14, `ops/reduce/mod.rs`): blocks of DITTO_REDUCE_BLOCK terms, each
// summed left to right, then the block totals left to right. A tree over the threads
// would be another order, so other bits than the CPU's and than every earlier run's. So
// the threads stage the terms of DITTO_ROW_STAGE elements at a time in shared memory and
// thread 0 adds them in that order. Those adds are the only serial work (c dependent f64
// adds per sum: a few microseconds for a GPT row, overlapped by the other rows' blocks);
// loads, terms, exp and outputs are spread over the block. The values are therefore the
// CPU's whatever the block and grid sizes (gpu_transformer_ops.rs forces odd ones).
//
// Its own translation unit because its kernels synchronise their blocks (the CUDA
// stand-in runs such kernels' blocks as fibers, docs/cuda-standin.md).
#include "transformer_ops.cuh"

#define DITTO_ROW_STAGE 256

// Each block takes rows blockIdx.x, blockIdx.x + gridDim.x, ...: the whole block walks
// the same rows, so every thread reaches every barrier.
#define DITTO_BLOCK_PER_ROW(r, rows) for (ditto_u64 r = blockIdx.x; r < (rows); r += gridDim.x)

// The block's shared memory for N sums: the staged terms, and the totals thread 0 shares.
template <int N>
struct DittoRowScratch {
    double staged[N][DITTO_ROW_STAGE];
    double totals[N];
};

// N sums over the terms of elements 0 .. n-1 in the contract's blocked order;
// `terms(i, t)` writes element i's N terms. Every thread of the block calls it with the
// same n and gets the totals.
template <int N, typename Terms>
__device__ void ditto_row_sums(ditto_u64 n, Terms terms, DittoRowScratch<N>& scratch, double* totals) {
    double total[N], block[N];
    for (int s = 0; s < N; ++s) total[s] = block[s] = 0.0;
    for (ditto_u64 start = 0; start < n; start += DITTO_ROW_STAGE) {
        const ditto_u64 end = ditto_min_u64(n, start + DITTO_ROW_STAGE);
        for (ditto_u64 i = start + threadIdx.x; i < end; i += blockDim.x) {
            double t[N];
            terms(i, t);
            for (int s = 0; s < N; ++s) scratch.staged[s][i - start] = t[s];
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            for (ditto_u64 i = start; i < end; ++i) {
                for (int s = 0; s < N; ++s) block[s] += scratch.staged[s][i - start];
                if ((i + 1) % DITTO_REDUCE_BLOCK == 0 || i + 1 == n) {
                    for (int s = 0; s < N; ++s) {
                        total[s] += block[s];
                        block[s] = 0.0;
                    }
                }
            }
        }
        __syncthreads();  // before the next stage overwrites the terms
    }
    if (threadIdx.x == 0)
        for (int s = 0; s < N; ++s) scratch.totals[s] = total[s];
    __syncthreads();
    for (int s = 0; s < N; ++s) totals[s] = scratch.totals[s];
    __syncthreads();  // before a later call writes the totals again
}

// The attention softmax's row maximum of z_0 .. z_{n-1} (n >= 1) as the CPU scans it:
// left to right, a NaN wins and stays, a tie keeps the first (so even the sign of a zero
// and a NaN's bits are the CPU's). Staged as f64, which holds every T exactly.
template <typename T, typename Value>
__device__ T ditto_row_max(ditto_u64 n, Value z, DittoRowScratch<1>& scratch) {
    T m = (T)0;
    for (ditto_u64 start = 0; start < n; start += DITTO_ROW_STAGE) {
        const ditto_u64 end = ditto_min_u64(n, start + DITTO_ROW_STAGE);
        for (ditto_u64 i = start + threadIdx.x; i < end; i += blockDim.x) scratch.staged[0][i - start] = (double)z(i);
        __syncthreads();
        if (threadIdx.x == 0) {
            for (ditto_u64 i = start; i < end; ++i) {
                const T v = (T)scratch.staged[0][i - start];
                if (i == 0 || (m == m && (v > m || v != v))) m = v;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) scratch.totals[0] = (double)m;
    __syncthreads();
    m = (T)scratch.totals[0];
    __syncthreads();
    return m;
}

// ---- layer norm over rows of c elements; w / b may be NULL (1 and 0) ----
// Row r: mean and rstd (f64, rounded once), then y = ((x - mean) * rstd) * w + b.
template <typename T>
__device__ void ditto_layer_norm_block(ditto_u64 r, ditto_u64 c, double eps, const T* x, const T* w, const T* b,
                                       T* out, T* mean_out, T* rstd_out, DittoRowScratch<1>& scratch) {
    const T* row = x + r * c;
    double sum;
    ditto_row_sums<1>(c, [&](ditto_u64 i, double* t) { t[0] = (double)row[i]; }, scratch, &sum);
    const double mean = sum / (double)c;
    ditto_row_sums<1>(
        c,
        [&](ditto_u64 i, double* t) {
            const double d = (double)row[i] - mean;
            t[0] = d * d;
        },
        scratch, &sum);
    const double var = sum / (double)c;
    const T m = (T)mean, rstd = (T)(1.0 / sqrt(var + eps));
    if (threadIdx.x == 0) {
        mean_out[r] = m;
        rstd_out[r] = rstd;
    }
    for (ditto_u64 j = threadIdx.x; j < c; j += blockDim.x) {
        const T xhat = (row[j] - m) * rstd;
        out[r * c + j] = xhat * ditto_ln_weight(w, j) + ditto_ln_bias(b, j);
    }
}

// Row r of the input gradient: g = dy * w; a = sum g / c, b = sum g xhat / c (f64);
// dx = rstd ((g - a) - xhat b) in f64, rounded once.
template <typename T>
__device__ void ditto_layer_norm_backward_block(ditto_u64 r, ditto_u64 c, const T* dy, const T* x, const T* mean,
                                                const T* rstd, const T* w, T* dx, DittoRowScratch<2>& scratch) {
    const T* dy_row = dy + r * c;
    const T* x_row = x + r * c;
    const T m = mean[r], s = rstd[r];
    double sums[2];
    ditto_row_sums<2>(
        c,
        [&](ditto_u64 i, double* t) {
            const T g = dy_row[i] * ditto_ln_weight(w, i);
            const T xhat = (x_row[i] - m) * s;
            t[0] = (double)g;
            t[1] = (double)g * (double)xhat;
        },
        scratch, sums);
    const double a = sums[0] / (double)c, b = sums[1] / (double)c, rs = (double)s;
    for (ditto_u64 i = threadIdx.x; i < c; i += blockDim.x) {
        const T g = dy_row[i] * ditto_ln_weight(w, i);
        const T xhat = (x_row[i] - m) * s;
        dx[r * c + i] = (T)(rs * (((double)g - a) - (double)xhat * b));
    }
}

// ---- causal softmax of attention scores [..., t, t]; row `row` is query row % t ----
// z_j = x_j * scale; m = max (NaN wins, as arg_max); p_j = exp(z_j - m) / sum in f64.
template <typename T>
__device__ void ditto_causal_softmax_block(ditto_u64 row, ditto_u64 t, T scale, const T* x, T* out, bool portable,
                                           DittoRowScratch<1>& scratch) {
    const ditto_u64 keys = row % t + 1;
    const T* xr = x + row * t;
    T* dst = out + row * t;
    const T m = ditto_row_max<T>(keys, [&](ditto_u64 j) { return (T)(xr[j] * scale); }, scratch);
    double total;
    ditto_row_sums<1>(
        keys, [&](ditto_u64 j, double* s) { s[0] = (double)ditto_exp_of((T)(xr[j] * scale - m), portable); },
        scratch, &total);
    for (ditto_u64 j = threadIdx.x; j < t; j += blockDim.x) {
        dst[j] = j < keys ? (T)((double)ditto_exp_of((T)(xr[j] * scale - m), portable) / total) : (T)0;
    }
}

// d = sum dp_j p_j (f64); dx_j = (p_j (dp_j - d)) scale in f64, rounded once; 0 after i.
template <typename T>
__device__ void ditto_causal_softmax_backward_block(ditto_u64 row, ditto_u64 t, double scale, const T* dp,
                                                    const T* p, T* dx, DittoRowScratch<1>& scratch) {
    const ditto_u64 keys = row % t + 1;
    const T* dpr = dp + row * t;
    const T* pr = p + row * t;
    double dot;
    ditto_row_sums<1>(keys, [&](ditto_u64 j, double* s) { s[0] = (double)dpr[j] * (double)pr[j]; }, scratch, &dot);
    for (ditto_u64 j = threadIdx.x; j < t; j += blockDim.x) {
        dx[row * t + j] = j < keys ? (T)((double)pr[j] * ((double)dpr[j] - dot) * scale) : (T)0;
    }
}

#define DITTO_ROW_KERNELS(SUFFIX, T)                                                                 \
    extern "C" __global__ void ditto_layer_norm_##SUFFIX(ditto_u64 rows, ditto_u64 c, double eps,   \
                                                         const T* x, const T* w, const T* b, T* out, \
                                                         T* mean, T* rstd) {                        \
        __shared__ DittoRowScratch<1> scratch;                                                      \
        DITTO_BLOCK_PER_ROW(r, rows) { ditto_layer_norm_block<T>(r, c, eps, x, w, b, out, mean, rstd, scratch); } \
    }                                                                                               \
    extern "C" __global__ void ditto_layer_norm_backward_##SUFFIX(ditto_u64 rows, ditto_u64 c,      \
                                                                  const T* dy, const T* x,          \
                                                                  const T* mean, const T* rstd,     \
                                                                  const T* w, T* dx) {              \
        __shared__ DittoRowScratch<2> scratch;                                                      \
        DITTO_BLOCK_PER_ROW(r, rows) {                                                              \
            ditto_layer_norm_backward_block<T>(r, c, dy, x, mean, rstd, w, dx, scratch);            \
        }                                                                                           \
    }                                                                                               \
    extern "C" __global__ void ditto_causal_softmax_##SUFFIX(ditto_u64 rows, ditto_u64 t, T scale,  \
                                                             int portable, const T* x, T* out) {    \
        __shared__ DittoRowScratch<1> scratch;                                                      \
        DITTO_BLOCK_PER_ROW(r, rows) { ditto_causal_softmax_block<T>(r, t, scale, x, out, portable != 0, scratch); } \
    }                                                                                               \
    extern "C" __global__ void ditto_causal_softmax_backward_##SUFFIX(ditto_u64 rows, ditto_u64 t,  \
                                                                      double scale, const T* dp,    \
                                                                      const T* p, T* dx) {          \
        __shared__ DittoRowScratch<1> scratch;                                                      \
        DITTO_BLOCK_PER_ROW(r, rows) { ditto_causal_softmax_backward_block<T>(r, t, scale, dp, p, dx, scratch); } \
    }

DITTO_ROW_KERNELS(f32, float)
DITTO_ROW_KERNELS(f64, double)
