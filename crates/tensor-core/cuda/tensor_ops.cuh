// The per-element and per-lane bodies of ditto's tensor-op kernels, as functions that
// compile both for the GPU (NVRTC, through tensor_ops.cu) and for the host (the parity
// shim in tests/host-parity/host/, which the tests compare with tensor-core's CPU ops
// bit for bit).
//
// Determinism: every output element is written by exactly one call, from its own
// inputs, in a fixed order; nothing depends on which thread makes the call. Sums follow
// tensor-core's documented order (consecutive blocks of DITTO_REDUCE_BLOCK summed left to
// right in double, then the block sums left to right), so they equal the CPU's bit for
// bit. Compiled with --fmad=false (NVRTC) and -ffp-contract=off (host), `a * b + c` is a
// multiply then an add on both sides, as in Rust.
#ifndef DITTO_TENSOR_OPS_CUH
#define DITTO_TENSOR_OPS_CUH

#ifndef __CUDACC_RTC__
#include <math.h>
#endif

// The host/device shim shared with the random kernels (__host__ / __device__ on the host).
#include "ditto_host_device.cuh"
// ditto's own f32 exp / log for portable arithmetic (docs/contract.md §14).
#include "portable_math.cuh"

#define DITTO_OPS_HD DITTO_HD

#define DITTO_MAX_RANK 8
#define DITTO_REDUCE_BLOCK 1024ULL
// Loads a reduction thread keeps in flight (ditto_block_sum); not part of any result.
#define DITTO_SUM_BATCH 32

typedef unsigned long long ditto_u64;
typedef long long ditto_i64;

// The logical shape of the elements a kernel walks, in row-major order.
struct DittoShape {
    ditto_u64 rank;
    ditto_u64 dims[DITTO_MAX_RANK];
};

// Where logical element `i` of a DittoShape lives in one operand's buffer: `offset` plus
// the sum of index * stride over the dimensions (stride 0 repeats a broadcast operand).
struct DittoView {
    ditto_u64 offset;
    ditto_u64 strides[DITTO_MAX_RANK];
};

DITTO_OPS_HD ditto_u64 ditto_position(const DittoShape& shape, const DittoView& view, ditto_u64 i) {
    ditto_u64 position = view.offset;
    for (int d = (int)shape.rank - 1; d >= 0; --d) {
        const ditto_u64 size = shape.dims[d];
        position += (i % size) * view.strides[d];
        i /= size;
    }
    return position;
}

DITTO_OPS_HD ditto_u64 ditto_min_u64(ditto_u64 a, ditto_u64 b) { return a < b ? a : b; }

// ---- elementwise ----
// Op codes; tensor-core's Rust side (ops::elementwise::binary::BinOp,
// ops::elementwise::unary::UnaryOp) uses the same numbers.
#define DITTO_ADD 0
#define DITTO_SUB 1
#define DITTO_MUL 2
#define DITTO_DIV 3

#define DITTO_RELU 0
#define DITTO_EXP 1
#define DITTO_LOG 2
#define DITTO_SQRT 3
#define DITTO_POW 4
#define DITTO_NEG 5
#define DITTO_AFFINE 6
#define DITTO_MUL_SCALAR 7
#define DITTO_ADD_SCALAR 8
// Portable arithmetic: ditto's own exp / log for f32 (portable_math.cuh); f64 keeps
// libdevice's, which portable arithmetic does not cover.
#define DITTO_PORTABLE_EXP 9
#define DITTO_PORTABLE_LOG 10
// Autocast (tensor-core's autocast.rs): f32 rounded to the nearest bf16, kept in f32.
#define DITTO_ROUND_BF16 11

// libdevice on the GPU (the same code on every GPU), the C library on the host.
DITTO_OPS_HD float ditto_exp(float x) { return expf(x); }
DITTO_OPS_HD double ditto_exp(double x) { return exp(x); }
DITTO_OPS_HD float ditto_log(float x) { return logf(x); }
DITTO_OPS_HD double ditto_log(double x) { return log(x); }
DITTO_OPS_HD float ditto_sqrt(float x) { return sqrtf(x); }
DITTO_OPS_HD double ditto_sqrt(double x) { return sqrt(x); }
DITTO_OPS_HD double ditto_portable_exp(double x) { return exp(x); }
DITTO_OPS_HD double ditto_portable_log(double x) { return log(x); }
DITTO_OPS_HD double ditto_portable_log_of_sum_as(double total, double) { return log(total); }
DITTO_OPS_HD float ditto_portable_log_of_sum_as(double total, float) { return ditto_portable_log_of_sum(total); }
DITTO_OPS_HD float ditto_round_bf16(float x) { return ditto_bf16_to_f32(ditto_f32_to_bf16(x)); }
// Never launched: the Rust side refuses f64 (rounding it through f32 would round twice).
DITTO_OPS_HD double ditto_round_bf16(double x) { return x; }
DITTO_OPS_HD float ditto_pow(float x, float e) { return powf(x, e); }
DITTO_OPS_HD double ditto_pow(double x, double e) { return pow(x, e); }

template <typename T>
DITTO_OPS_HD T ditto_binary_op(int op, T a, T b) {
    switch (op) {
        case DITTO_ADD: return a + b;
        case DITTO_SUB: return a - b;
        case DITTO_MUL: return a * b;
        default: return a / b;
    }
}

template <typename T>
DITTO_OPS_HD T ditto_unary_op(int op, T x, T a, T b) {
    switch (op) {
        case DITTO_RELU: return (x > (T)0 || x != x) ? x : (T)0;  // NaN stays NaN
        case DITTO_EXP: return ditto_exp(x);
        case DITTO_LOG: return ditto_log(x);
        case DITTO_SQRT: return ditto_sqrt(x);
        case DITTO_POW: return ditto_pow(x, a);
        case DITTO_PORTABLE_EXP: return ditto_portable_exp(x);
        case DITTO_PORTABLE_LOG: return ditto_portable_log(x);
        case DITTO_ROUND_BF16: return ditto_round_bf16(x);
        case DITTO_NEG: return -x;
        case DITTO_AFFINE: return x * a + b;  // two roundings, never fused
        case DITTO_MUL_SCALAR: return x * a;
        default: return x + a;
    }
}

// out[i] = lhs[view_l(i)] op rhs[view_r(i)]: broadcasting through zero strides.
template <typename T>
DITTO_OPS_HD void ditto_binary_element(ditto_u64 i, int op, const DittoShape& shape,
                                       const DittoView& lhs_view, const DittoView& rhs_view,
                                       const T* lhs, const T* rhs, T* out) {
    out[i] = ditto_binary_op<T>(op, lhs[ditto_position(shape, lhs_view, i)],
                                rhs[ditto_position(shape, rhs_view, i)]);
}

// The gradient of relu: `grad` where `input > 0`, else 0.
template <typename T>
DITTO_OPS_HD T ditto_relu_backward_op(T grad, T input) {
    return input > (T)0 ? grad : (T)0;
}

// The optimiser's update `s + alpha * x`: a multiply then an add, as on the CPU.
template <typename T>
DITTO_OPS_HD T ditto_axpy_op(T s, T alpha, T x) {
    return s + alpha * x;
}

// One element of SGD with momentum past its first step (Tensor::sgd_momentum_step_):
// the rule `axpy_` and `scale_` apply one after another on the CPU, in their order,
// every `a + b * c` a multiply then an add.
template <typename T>
DITTO_OPS_HD void ditto_sgd_momentum_op(T& p, T& b, T g, T weight_decay, T momentum, T keep,
                                        T step, int decay, int nesterov) {
    T d = decay ? g + weight_decay * p : g;
    b = b * momentum + keep * d;
    d = nesterov ? d + momentum * b : b;
    p = p + step * d;
}

// ---- reductions over one dimension of a dense (outer, size, inner) tensor ----
// Element (o, k, j) sits at x[(o * size + k) * inner + j]; a lane is (o, j).

// Phase 1, item t = (o * blocks + b) * inner + j: the sum of block b of lane (o, j).
template <typename T>
DITTO_OPS_HD void ditto_block_sum(ditto_u64 t, ditto_u64 size, ditto_u64 inner, ditto_u64 blocks,
                                  const T* x, double* partial) {
    const ditto_u64 j = t % inner, b = (t / inner) % blocks, o = t / (inner * blocks);
    const ditto_u64 end = ditto_min_u64(size, (b + 1) * DITTO_REDUCE_BLOCK);
    const T* lane = x + o * size * inner + j;  // element k of the lane: lane[k * inner]
    double block = 0.0;
    ditto_u64 k = b * DITTO_REDUCE_BLOCK;
    // A GPU thread waits for each load in turn unless it has the next ones in flight: one
    // load per add made the bias gradients of a 1024-row batch (a lane of 1024 elements
    // per thread, few lanes) take 0.3 ms each on an H100. So the loads go out in batches
    // of DITTO_SUM_BATCH, and the adds still run one by one in index order: the same bits.
    for (; k + DITTO_SUM_BATCH <= end; k += DITTO_SUM_BATCH) {
        T batch[DITTO_SUM_BATCH];
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
        for (int u = 0; u < DITTO_SUM_BATCH; ++u) batch[u] = lane[(k + u) * inner];
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
        for (int u = 0; u < DITTO_SUM_BATCH; ++u) block += (double)batch[u];
    }
    for (; k < end; ++k) block += (double)lane[k * inner];
    partial[t] = block;
}

// Phase 2, item t = o * inner + j: the block sums of lane (o, j) left to right, divided by
// `size` for a mean, rounded once to T.
template <typename T>
DITTO_OPS_HD void ditto_finish_sum(ditto_u64 t, ditto_u64 size, ditto_u64 inner, ditto_u64 blocks,
                                   int mean, const double* partial, T* out) {
    const ditto_u64 j = t % inner, o = t / inner;
    double total = 0.0;
    for (ditto_u64 b = 0; b < blocks; ++b) total += partial[(o * blocks + b) * inner + j];
    if (mean) total = total / (double)size;
    out[t] = (T)total;
}

// The first maximum of a lane of `size >= 1` elements `stride` apart, and its index;
// NaN beats everything and the first NaN wins (as on the CPU and in PyTorch).
template <typename T>
DITTO_OPS_HD ditto_u64 ditto_lane_argmax(const T* lane, ditto_u64 size, ditto_u64 stride, T* max) {
    ditto_u64 best = 0;
    T m = lane[0];
    for (ditto_u64 k = 1; k < size && m == m; ++k) {
        const T v = lane[k * stride];
        if (v != v || v > m) {
            m = v;
            best = k;
        }
    }
    *max = m;
    return best;
}

// Item t = o * inner + j: the maximum of lane (o, j) and its index.
template <typename T>
DITTO_OPS_HD void ditto_max_lane(ditto_u64 t, ditto_u64 size, ditto_u64 inner, const T* x, T* values,
                                 ditto_i64* indices) {
    const ditto_u64 j = t % inner, o = t / inner;
    T m;
    indices[t] = (ditto_i64)ditto_lane_argmax(x + o * size * inner + j, size, inner, &m);
    values[t] = m;
}

// Item t = o * inner + j: log_softmax of lane (o, j) in the steps of Tensor::log_softmax:
// the maximum m, z = sum exp(x - m) (exp in T, the sum in the blocked double order),
// l = log(z) in double rounded to T, out = (x - m) - l. With `portable` (f32 under
// portable arithmetic, docs/contract.md §14) exp is ditto_portable_exp and
// l = ditto_portable_log_of_sum(z).
template <typename T>
DITTO_OPS_HD void ditto_log_softmax_lane(ditto_u64 t, ditto_u64 size, ditto_u64 inner, const T* x,
                                         T* out, bool portable = false) {
    const ditto_u64 j = t % inner, o = t / inner;
    const T* lane = x + o * size * inner + j;
    T* dst = out + o * size * inner + j;
    T m;
    ditto_lane_argmax(lane, size, inner, &m);
    double total = 0.0;
    for (ditto_u64 start = 0; start < size; start += DITTO_REDUCE_BLOCK) {
        const ditto_u64 end = ditto_min_u64(size, start + DITTO_REDUCE_BLOCK);
        double block = 0.0;
        for (ditto_u64 k = start; k < end; ++k) {
            const T s = (T)(lane[k * inner] - m);
            block += (double)(portable ? ditto_portable_exp(s) : ditto_exp(s));
        }
        total += block;
    }
    const T l = portable ? ditto_portable_log_of_sum_as(total, (T)0) : (T)log(total);
    for (ditto_u64 k = 0; k < size; ++k) dst[k * inner] = (lane[k * inner] - m) - l;
}

// ---- accumulation into shared targets: index_add, scatter_add, the atomic sum ----
// Fast paths add with atomics in arrival order (nondeterministic); deterministic paths
// give each target to one work item, which adds its contributions in index order from
// positions the host sorted (a "CSR": starts[u] .. starts[u + 1] index a position list).
// Both add `alpha * x` (a multiply, then an add) like tensor-core's CPU paths.

// `*target += value` atomically on the GPU. On the host (parity shim, CUDA stand-in)
// work items run one at a time, so a plain add is the same operation.
DITTO_OPS_HD void ditto_atomic_add(float* target, float value) {
#ifdef __CUDA_ARCH__
    atomicAdd(target, value);
#else
    *target = *target + value;
#endif
}
DITTO_OPS_HD void ditto_atomic_add(double* target, double value) {
#ifdef __CUDA_ARCH__
    atomicAdd(target, value);
#else
    *target = *target + value;
#endif
}

// index_add sees out as (outer, size, inner), src as (outer, n, inner), index as (n).
// Fast, item t = (o * n + k) * inner + j: add alpha * src[t] into out[o, index[k], j].
template <typename T>
DITTO_OPS_HD void ditto_index_add_atomic_item(ditto_u64 t, ditto_u64 size, ditto_u64 inner, ditto_u64 n,
                                              T alpha, const ditto_i64* index, const T* src, T* out) {
    const ditto_u64 j = t % inner, k = (t / inner) % n, o = t / (inner * n);
    ditto_atomic_add(&out[(o * size + (ditto_u64)index[k]) * inner + j], alpha * src[t]);
}

// Deterministic, item t = (o * size + r) * inner + j: out[t] plus the contributions of
// row r (positions[starts[r] .. starts[r + 1]], ascending) in tensor-core's grouped order
// (ops::accumulate::grouped): the positions of each group of DITTO_INDEX_ADD_GROUP are
// summed from +0.0 in index order, and each group's sum is added to out[t] in group order.
// With `fresh` out is taken to hold +0.0 (it is written, not read): the sums of a zero
// tensor's index_add without writing the zeros first.
#define DITTO_INDEX_ADD_GROUP 1024ULL
template <typename T>
DITTO_OPS_HD void ditto_index_add_owner_item(ditto_u64 t, ditto_u64 size, ditto_u64 inner, ditto_u64 n,
                                             T alpha, const ditto_u64* starts, const ditto_u64* positions,
                                             const T* src, T* out, bool fresh) {
    const ditto_u64 j = t % inner, r = (t / inner) % size, o = t / (inner * size);
    const ditto_u64 begin = starts[r], end = starts[r + 1];
    if (begin == end) {
        if (fresh) out[t] = (T)0;
        return;
    }
    T acc = fresh ? (T)0 : out[t];
    T partial = (T)0;
    ditto_u64 group = positions[begin] / DITTO_INDEX_ADD_GROUP;
    for (ditto_u64 p = begin; p < end; ++p) {
        const ditto_u64 k = positions[p];
        if (k / DITTO_INDEX_ADD_GROUP != group) {
            acc = acc + partial;
            partial = (T)0;
            group = k / DITTO_INDEX_ADD_GROUP;
        }
        partial = partial + alpha * src[(o * n + k) * inner + j];
    }
    out[t] = acc + partial;
}

// scatter_add: index element e = (o * n + k) * index_step + j belongs to lane
// l = o * index_step + j, whose targets start at bases[2l] in out and sources at
// bases[2l + 1] in src. Fast: add its source into its target atomically.
template <typename T>
DITTO_OPS_HD void ditto_scatter_add_atomic_item(ditto_u64 e, ditto_u64 n, ditto_u64 index_step,
                                                ditto_u64 dst_step, ditto_u64 src_step,
                                                const ditto_u64* bases, const ditto_i64* index,
                                                const T* src, T* out) {
    const ditto_u64 j = e % index_step, k = (e / index_step) % n, o = e / (index_step * n);
    const ditto_u64 l = o * index_step + j;
    ditto_atomic_add(&out[bases[2 * l] + (ditto_u64)index[e] * dst_step], src[bases[2 * l + 1] + k * src_step]);
}

// Deterministic, item u: target targets[u] plus its sources src[sources[p]] for p in
// starts[u] .. starts[u + 1] (in index order).
template <typename T>
DITTO_OPS_HD void ditto_scatter_add_owner_item(ditto_u64 u, const ditto_u64* targets, const ditto_u64* starts,
                                               const ditto_u64* sources, const T* src, T* out) {
    T acc = out[targets[u]];
    for (ditto_u64 p = starts[u]; p < starts[u + 1]; ++p) acc = acc + src[sources[p]];
    out[targets[u]] = acc;
}

// The one-pass atomic sum of a dense (outer, size, inner) tensor along `size`: the work
// item starting at element `first` walks first, first + stride, ... below `count`,
// summing in double and adding its running sum into totals[lane] whenever the lane
// (o * inner + j) changes, and at the end. The pieces of a lane arrive in any order, so
// only their sum in double varies, before the one rounding (ditto_finish_sum with
// blocks = 1). With inner == 1 a work item stays in one lane for long runs: one atomic
// per work item and lane.
template <typename T>
DITTO_OPS_HD void ditto_sum_atomic_walk(ditto_u64 first, ditto_u64 stride, ditto_u64 count, ditto_u64 size,
                                        ditto_u64 inner, const T* x, double* totals) {
    if (first >= count) return;
    ditto_u64 lane = (first / (size * inner)) * inner + first % inner;
    double acc = 0.0;
    for (ditto_u64 i = first; i < count; i += stride) {
        const ditto_u64 l = (i / (size * inner)) * inner + i % inner;
        if (l != lane) {
            ditto_atomic_add(&totals[lane], acc);
            acc = 0.0;
            lane = l;
        }
        acc += (double)x[i];
    }
    ditto_atomic_add(&totals[lane], acc);
}

// ---- gather / one_hot: picking by a dense i64 index tensor ----
// A quiet NaN: what an index outside its dimension gives on the device, where checking
// it would mean reading the index back to the host (the CPU ops return an error instead).
template <typename T>
DITTO_OPS_HD T ditto_quiet_nan() {
    const T zero = (T)0;
    return zero / zero;
}

// torch.gather's element i (row-major over the index's shape): the source element at i's
// coordinates with coordinate `dim` replaced by index[i]. `src_view` is the source's view
// with the stride of `dim` zeroed; `dim_stride` / `dim_size` are that dimension's.
template <typename T>
DITTO_OPS_HD void ditto_gather_index_element(ditto_u64 i, const DittoShape& shape, const DittoView& src_view,
                                             ditto_u64 dim_stride, ditto_u64 dim_size, const ditto_i64* index,
                                             const T* src, T* out) {
    const ditto_i64 k = index[i];
    out[i] = (k >= 0 && (ditto_u64)k < dim_size)
                 ? src[ditto_position(shape, src_view, i) + (ditto_u64)k * dim_stride]
                 : ditto_quiet_nan<T>();
}

// one_hot's element i of a dense (n, classes) output: 1 where the column is index[row],
// else 0; a whole row of NaN when index[row] is outside [0, classes).
template <typename T>
DITTO_OPS_HD void ditto_one_hot_element(ditto_u64 i, ditto_u64 classes, const ditto_i64* index, T* out) {
    const ditto_i64 k = index[i / classes];
    if (k < 0 || (ditto_u64)k >= classes) {
        out[i] = ditto_quiet_nan<T>();
    } else {
        out[i] = (i % classes == (ditto_u64)k) ? (T)1 : (T)0;
    }
}

#endif  // DITTO_TENSOR_OPS_CUH
