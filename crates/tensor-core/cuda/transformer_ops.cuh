// The per-element bodies of the transformer ops' kernels (GELU with the tanh
// approximation, layer norm's helpers and parameter gradients, AdamW, clipping), for the
// GPU (tensor_ops.cu, and row_ops.cu for the block-per-row kernels of layer norm and the
// causal softmax) and for the host (the CUDA stand-in compiles the same .cu).
//
// Each body follows the evaluation order its CPU op documents (ops/elementwise/gelu.rs,
// ops/normalization/mod.rs, ops/attention/mod.rs, ops/optimizers/adamw.rs), operation
// for operation, so with ditto's own exp / tanh (portable arithmetic, docs/contract.md
// §14) the results are the CPU's bits; otherwise only exp / tanh are the platform's
// (libdevice on a GPU).
// Every output element is written by exactly one call, and every sum runs in the
// contract's blocked f64 order: no atomics, so no value depends on the launch.
#ifndef DITTO_TRANSFORMER_OPS_CUH
#define DITTO_TRANSFORMER_OPS_CUH

#include "tensor_ops.cuh"

DITTO_OPS_HD float ditto_tanh_of(float x, bool portable) { return portable ? ditto_portable_tanh(x) : tanhf(x); }
// Portable arithmetic does not cover f64: the math library's tanh either way (as the CPU).
DITTO_OPS_HD double ditto_tanh_of(double x, bool) { return tanh(x); }

template <typename T>
DITTO_OPS_HD T ditto_exp_of(T x, bool portable) {
    return portable ? ditto_portable_exp(x) : ditto_exp(x);
}

// ---- GELU, tanh approximation (beta = sqrt(2/pi), kappa = 0.044715, rounded to T) ----
template <typename T>
DITTO_OPS_HD T ditto_gelu_tanh_op(T x, T beta, T kappa, bool portable) {
    const T cube = x * x * x;
    const T inner = beta * (x + kappa * cube);
    return (T)0.5 * x * ((T)1 + ditto_tanh_of(inner, portable));
}

// GELU's input: x[i], or x[i] + bias[i % c] (one correctly rounded add, as `add`).
template <typename T>
DITTO_OPS_HD T ditto_biased(const T* x, const T* bias, ditto_u64 c, ditto_u64 i) {
    return bias ? x[i] + bias[i % c] : x[i];
}

// grad * d gelu / dx, as PyTorch's GeluBackwardKernel writes it.
template <typename T>
DITTO_OPS_HD T ditto_gelu_tanh_backward_op(T grad, T x, T beta, T kappa, bool portable) {
    const T half = (T)0.5, one = (T)1, three = (T)3;
    const T square = x * x;
    const T cube = square * x;
    const T inner = beta * (x + kappa * cube);
    const T tanh_inner = ditto_tanh_of(inner, portable);
    const T left = half * x;
    const T right = one + tanh_inner;
    const T left_derivative = half * right;
    const T tanh_derivative = one - tanh_inner * tanh_inner;
    const T inner_derivative = beta * (one + three * kappa * square);
    const T right_derivative = left * tanh_derivative * inner_derivative;
    return grad * (left_derivative + right_derivative);
}

// ---- layer norm over rows of c elements; w / b may be NULL (1 and 0) ----
template <typename T>
DITTO_OPS_HD T ditto_ln_weight(const T* w, ditto_u64 j) { return w ? w[j] : (T)1; }
template <typename T>
DITTO_OPS_HD T ditto_ln_bias(const T* b, ditto_u64 j) { return b ? b[j] : (T)0; }

// The weight and bias gradients are sums over the rows of dy * xhat and dy (products in
// f64), in the blocked order over rows: block k's partials (rows k * DITTO_REDUCE_BLOCK
// onwards, left to right) for column j, then each column's partials left to right,
// rounded once. Every (block, column) pair is its own work item, so the first pass has
// columns x blocks of parallel work, not just columns, and the order is fixed whatever
// the launch.
template <typename T>
DITTO_OPS_HD void ditto_layer_norm_param_partial(ditto_u64 item, ditto_u64 rows, ditto_u64 c, const T* dy,
                                                 const T* x, const T* mean, const T* rstd, double* part_w,
                                                 double* part_b) {
    const ditto_u64 k = item / c, j = item % c;
    const ditto_u64 end = ditto_min_u64(rows, (k + 1) * DITTO_REDUCE_BLOCK);
    double block_w = 0.0, block_b = 0.0;
    for (ditto_u64 r = k * DITTO_REDUCE_BLOCK; r < end; ++r) {
        const T g = dy[r * c + j];
        const T xhat = (x[r * c + j] - mean[r]) * rstd[r];
        block_w += (double)g * (double)xhat;
        block_b += (double)g;
    }
    part_w[item] = block_w;
    part_b[item] = block_b;
}

template <typename T>
DITTO_OPS_HD void ditto_layer_norm_param_finish(ditto_u64 j, ditto_u64 blocks, ditto_u64 c, const double* part_w,
                                                const double* part_b, T* dw, T* db) {
    double total_w = 0.0, total_b = 0.0;
    for (ditto_u64 k = 0; k < blocks; ++k) {
        total_w += part_w[k * c + j];
        total_b += part_b[k * c + j];
    }
    dw[j] = (T)total_w;
    db[j] = (T)total_b;
}

// ---- one AdamW step of one element (ops/optimizers/adamw.rs), scalars rounded to T on the host ----
template <typename T>
struct DittoAdamW {
    T decay_factor;
    T lerp_weight;
    T beta2;
    T one_minus_beta2;
    T correction2_sqrt;
    T eps;
    T neg_step_size;
    int decay;
    int lerp_low;
};

template <typename T>
DITTO_OPS_HD void ditto_adamw_op(T& p, T& m, T& v, T g, const DittoAdamW<T>& s) {
    if (s.decay) p = p * s.decay_factor;
    m = s.lerp_low ? m + s.lerp_weight * (g - m) : g - (g - m) * ((T)1 - s.lerp_weight);
    v = v * s.beta2 + s.one_minus_beta2 * g * g;
    const T denom = ditto_sqrt(v) / s.correction2_sqrt + s.eps;
    p = p + s.neg_step_size * m / denom;
}

// ---- AdamW over up to DITTO_ADAMW_MANY parameters in one launch (ops/optimizers/ ----
// ---- adamw_many.rs): their sizes, buffers and scalars by value, parameter y in block row y ----
#define DITTO_ADAMW_MANY 24
template <typename T>
struct DittoAdamWMany {
    ditto_u64 n[DITTO_ADAMW_MANY];
    const T* g[DITTO_ADAMW_MANY];
    T* m[DITTO_ADAMW_MANY];
    T* v[DITTO_ADAMW_MANY];
    T* p[DITTO_ADAMW_MANY];
    DittoAdamW<T> s[DITTO_ADAMW_MANY];
};

// ---- gradient clipping's coefficients (ops/optimizers/clip.rs): from the parameters' ----
// ---- sums of squares, the global 2-norm and the factor every gradient is multiplied by ----
template <typename T>
DITTO_OPS_HD void ditto_clip_coefficients(ditto_u64 n, double max_norm, const T* sums, T* out) {
    double total = 0.0;
    for (ditto_u64 i = 0; i < n; ++i) total += (double)sums[i];
    const double norm = sqrt(total);
    const double coef = max_norm / (norm + 1e-6);
    const bool finite = norm - norm == 0.0;  // false for inf and NaN
    out[0] = (T)norm;
    out[1] = (T)(finite && coef < 1.0 ? coef : 1.0);
}

#endif  // DITTO_TRANSFORMER_OPS_CUH
