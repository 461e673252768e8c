// The per-element and per-lane bodies of ditto's tensor-op kernels, as functions that
// compile both for the GPU (NVRTC, through tensor_ops.cu) and for the host (the parity
// shim in ../host/, which the tests compare with tensor-core's CPU ops bit for bit).
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

#define DITTO_OPS_HD DITTO_HD

#define DITTO_MAX_RANK 8
#define DITTO_REDUCE_BLOCK 1024ULL

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
// Op codes; tensor-core's Rust side (ops::binary::BinOp, ops::cuda::UnaryOp) uses the
// same numbers.
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

// libdevice on the GPU (the same code on every GPU), the C library on the host.
DITTO_OPS_HD float ditto_exp(float x) { return expf(x); }
DITTO_OPS_HD double ditto_exp(double x) { return exp(x); }
DITTO_OPS_HD float ditto_log(float x) { return logf(x); }
DITTO_OPS_HD double ditto_log(double x) { return log(x); }
DITTO_OPS_HD float ditto_sqrt(float x) { return sqrtf(x); }
DITTO_OPS_HD double ditto_sqrt(double x) { return sqrt(x); }
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

// ---- reductions over one dimension of a dense (outer, size, inner) tensor ----
// Element (o, k, j) sits at x[(o * size + k) * inner + j]; a lane is (o, j).

// Phase 1, item t = (o * blocks + b) * inner + j: the sum of block b of lane (o, j).
template <typename T>
DITTO_OPS_HD void ditto_block_sum(ditto_u64 t, ditto_u64 size, ditto_u64 inner, ditto_u64 blocks,
                                  const T* x, double* partial) {
    const ditto_u64 j = t % inner, b = (t / inner) % blocks, o = t / (inner * blocks);
    const ditto_u64 end = ditto_min_u64(size, (b + 1) * DITTO_REDUCE_BLOCK);
    double block = 0.0;
    for (ditto_u64 k = b * DITTO_REDUCE_BLOCK; k < end; ++k) block += (double)x[(o * size + k) * inner + j];
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
// l = log(z) in double rounded to T, out = (x - m) - l.
template <typename T>
DITTO_OPS_HD void ditto_log_softmax_lane(ditto_u64 t, ditto_u64 size, ditto_u64 inner, const T* x,
                                         T* out) {
    const ditto_u64 j = t % inner, o = t / inner;
    const T* lane = x + o * size * inner + j;
    T* dst = out + o * size * inner + j;
    T m;
    ditto_lane_argmax(lane, size, inner, &m);
    double total = 0.0;
    for (ditto_u64 start = 0; start < size; start += DITTO_REDUCE_BLOCK) {
        const ditto_u64 end = ditto_min_u64(size, start + DITTO_REDUCE_BLOCK);
        double block = 0.0;
        for (ditto_u64 k = start; k < end; ++k) block += (double)ditto_exp((T)(lane[k * inner] - m));
        total += block;
    }
    const T l = (T)log(total);
    for (ditto_u64 k = 0; k < size; ++k) dst[k * inner] = (lane[k * inner] - m) - l;
}

#endif  // DITTO_TENSOR_OPS_CUH
