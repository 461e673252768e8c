// The per-element and per-row bodies of the transformer ops' kernels (GELU with the tanh
// approximation, layer norm, the causal softmax of attention, AdamW), for the GPU
// (tensor_ops.cu) and for the host (the CUDA stand-in compiles the same .cu).
//
// Each body follows the evaluation order its CPU op documents (ops/elementwise/gelu.rs,
// ops/normalization/mod.rs, ops/attention/mod.rs, ops/optimizers/adamw.rs), operation
// for operation, so with ditto's own exp / tanh (portable arithmetic, docs/contract.md
// §14) the results are the CPU's bits; otherwise only exp / tanh are the platform's
// (libdevice on a GPU).
// Every output element is written by exactly one call, and every sum over a row or a
// column runs in the contract's blocked f64 order in that one call: no atomics, so no
// value depends on the launch.
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

// Row r: mean and rstd (f64, rounded once), then y = ((x - mean) * rstd) * w + b.
template <typename T>
DITTO_OPS_HD void ditto_layer_norm_row(ditto_u64 r, ditto_u64 c, double eps, const T* x, const T* w,
                                       const T* b, T* out, T* mean_out, T* rstd_out) {
    const T* row = x + r * c;
    double total = 0.0;
    for (ditto_u64 start = 0; start < c; start += DITTO_REDUCE_BLOCK) {
        const ditto_u64 end = ditto_min_u64(c, start + DITTO_REDUCE_BLOCK);
        double block = 0.0;
        for (ditto_u64 i = start; i < end; ++i) block += (double)row[i];
        total += block;
    }
    const double mean = total / (double)c;
    total = 0.0;
    for (ditto_u64 start = 0; start < c; start += DITTO_REDUCE_BLOCK) {
        const ditto_u64 end = ditto_min_u64(c, start + DITTO_REDUCE_BLOCK);
        double block = 0.0;
        for (ditto_u64 i = start; i < end; ++i) {
            const double d = (double)row[i] - mean;
            block += d * d;
        }
        total += block;
    }
    const double var = total / (double)c;
    const T m = (T)mean, rstd = (T)(1.0 / sqrt(var + eps));
    mean_out[r] = m;
    rstd_out[r] = rstd;
    for (ditto_u64 j = 0; j < c; ++j) {
        const T xhat = (row[j] - m) * rstd;
        out[r * c + j] = xhat * ditto_ln_weight(w, j) + ditto_ln_bias(b, j);
    }
}

// Row r of the input gradient: g = dy * w; a = sum g / c, b = sum g xhat / c (f64);
// dx = rstd ((g - a) - xhat b) in f64, rounded once.
template <typename T>
DITTO_OPS_HD void ditto_layer_norm_backward_row(ditto_u64 r, ditto_u64 c, const T* dy, const T* x,
                                                const T* mean, const T* rstd, const T* w, T* dx) {
    const T* dy_row = dy + r * c;
    const T* x_row = x + r * c;
    const T m = mean[r], s = rstd[r];
    double sum_g = 0.0, sum_gx = 0.0;
    for (ditto_u64 start = 0; start < c; start += DITTO_REDUCE_BLOCK) {
        const ditto_u64 end = ditto_min_u64(c, start + DITTO_REDUCE_BLOCK);
        double block_g = 0.0, block_gx = 0.0;
        for (ditto_u64 i = start; i < end; ++i) {
            const T g = dy_row[i] * ditto_ln_weight(w, i);
            const T xhat = (x_row[i] - m) * s;
            block_g += (double)g;
            block_gx += (double)g * (double)xhat;
        }
        sum_g += block_g;
        sum_gx += block_gx;
    }
    const double a = sum_g / (double)c, b = sum_gx / (double)c, rs = (double)s;
    for (ditto_u64 i = 0; i < c; ++i) {
        const T g = dy_row[i] * ditto_ln_weight(w, i);
        const T xhat = (x_row[i] - m) * s;
        dx[r * c + i] = (T)(rs * (((double)g - a) - (double)xhat * b));
    }
}

// Column j of the weight and bias gradients: sums over the rows of dy * xhat and dy
// (products in f64), in the blocked order, rounded once. One call per column walks
// every row, so the order is fixed whatever the launch.
template <typename T>
DITTO_OPS_HD void ditto_layer_norm_param_grads_column(ditto_u64 j, ditto_u64 rows, ditto_u64 c, const T* dy,
                                                      const T* x, const T* mean, const T* rstd, T* dw,
                                                      T* db) {
    double total_w = 0.0, total_b = 0.0;
    for (ditto_u64 start = 0; start < rows; start += DITTO_REDUCE_BLOCK) {
        const ditto_u64 end = ditto_min_u64(rows, start + DITTO_REDUCE_BLOCK);
        double block_w = 0.0, block_b = 0.0;
        for (ditto_u64 r = start; r < end; ++r) {
            const T g = dy[r * c + j];
            const T xhat = (x[r * c + j] - mean[r]) * rstd[r];
            block_w += (double)g * (double)xhat;
            block_b += (double)g;
        }
        total_w += block_w;
        total_b += block_b;
    }
    dw[j] = (T)total_w;
    db[j] = (T)total_b;
}

// ---- causal softmax of attention scores [..., t, t]; row `row` is query row % t ----
// z_j = x_j * scale; m = max (NaN wins, as arg_max); p_j = exp(z_j - m) / sum in f64.
template <typename T>
DITTO_OPS_HD void ditto_causal_softmax_row(ditto_u64 row, ditto_u64 t, T scale, const T* x, T* out,
                                           bool portable) {
    const ditto_u64 keys = row % t + 1;
    const T* xr = x + row * t;
    T* dst = out + row * t;
    T m = xr[0] * scale;
    for (ditto_u64 j = 1; j < keys; ++j) {
        const T z = xr[j] * scale;
        if (m == m && (z > m || z != z)) m = z;
    }
    double total = 0.0;
    for (ditto_u64 start = 0; start < keys; start += DITTO_REDUCE_BLOCK) {
        const ditto_u64 end = ditto_min_u64(keys, start + DITTO_REDUCE_BLOCK);
        double block = 0.0;
        for (ditto_u64 j = start; j < end; ++j) block += (double)ditto_exp_of((T)(xr[j] * scale - m), portable);
        total += block;
    }
    for (ditto_u64 j = 0; j < t; ++j) {
        dst[j] = j < keys ? (T)((double)ditto_exp_of((T)(xr[j] * scale - m), portable) / total) : (T)0;
    }
}

// d = sum dp_j p_j (f64); dx_j = (p_j (dp_j - d)) scale in f64, rounded once; 0 after i.
template <typename T>
DITTO_OPS_HD void ditto_causal_softmax_backward_row(ditto_u64 row, ditto_u64 t, double scale, const T* dp,
                                                    const T* p, T* dx) {
    const ditto_u64 keys = row % t + 1;
    const T* dpr = dp + row * t;
    const T* pr = p + row * t;
    double dot = 0.0;
    for (ditto_u64 start = 0; start < keys; start += DITTO_REDUCE_BLOCK) {
        const ditto_u64 end = ditto_min_u64(keys, start + DITTO_REDUCE_BLOCK);
        double block = 0.0;
        for (ditto_u64 j = start; j < end; ++j) block += (double)dpr[j] * (double)pr[j];
        dot += block;
    }
    for (ditto_u64 j = 0; j < t; ++j) {
        dx[row * t + j] = j < keys ? (T)((double)pr[j] * ((double)dpr[j] - dot) * scale) : (T)0;
    }
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
