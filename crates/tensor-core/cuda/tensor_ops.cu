// ditto's tensor ops on CUDA: the kernels behind Tensor's elementwise ops, reductions
// and log_softmax when a tensor lives on a GPU (matmul goes to cuBLAS instead).
//
// Each kernel is a grid-stride loop over its work items that calls the item's body from
// tensor_ops.cuh, the same function the host parity tests run; so no value depends on
// the grid, the block size or the GPU model, only on the inputs. exp / log / pow are
// CUDA's libdevice functions: not bit-equal to the CPU's libm.
#include "tensor_ops.cuh"
#include "transformer_ops.cuh"

#define DITTO_GRID_STRIDE(i, n) \
    for (ditto_u64 i = (ditto_u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (ditto_u64)gridDim.x * blockDim.x)

// ---- layout: gather a view into a dense buffer, scatter a dense buffer into a view, ----
// ---- pick slices by index (index_select) ------------------------------------------------
// By element width, so one kernel serves every dtype of that size.
#define DITTO_LAYOUT_KERNELS(WIDTH, T)                                                               \
    extern "C" __global__ void ditto_gather_##WIDTH(ditto_u64 n, DittoShape shape, DittoView view,  \
                                                    const T* src, T* dst) {                         \
        DITTO_GRID_STRIDE(i, n) { dst[i] = src[ditto_position(shape, view, i)]; }                   \
    }                                                                                               \
    extern "C" __global__ void ditto_scatter_##WIDTH(ditto_u64 n, DittoShape shape, DittoView view, \
                                                     const T* src, T* dst) {                        \
        DITTO_GRID_STRIDE(i, n) { dst[ditto_position(shape, view, i)] = src[i]; }                   \
    }                                                                                               \
    /* index_select of a dense [outer, size, inner] source: dst[o][j][k] = src[o][index[j]][k] */   \
    extern "C" __global__ void ditto_index_select_##WIDTH(ditto_u64 n, ditto_u64 size,               \
                                                          ditto_u64 inner, ditto_u64 count,          \
                                                          const ditto_u64* index, const T* src,      \
                                                          T* dst) {                                  \
        DITTO_GRID_STRIDE(i, n) {                                                                   \
            const ditto_u64 k = i % inner, j = (i / inner) % count, o = i / (inner * count);        \
            dst[i] = src[(o * size + index[j]) * inner + k];                                        \
        }                                                                                           \
    }

DITTO_LAYOUT_KERNELS(8, unsigned char)
DITTO_LAYOUT_KERNELS(16, unsigned short)
DITTO_LAYOUT_KERNELS(32, unsigned int)
DITTO_LAYOUT_KERNELS(64, ditto_u64)

// A gather that narrows f32 to bf16 (round to nearest even; the bits as unsigned short):
// bf16 autocast's GEMM operands, and to_dtype(BF16) of an f32 tensor on the device.
extern "C" __global__ void ditto_gather_f32_to_bf16(ditto_u64 n, DittoShape shape, DittoView view, const float* src,
                                                    unsigned short* dst) {
    DITTO_GRID_STRIDE(i, n) { dst[i] = ditto_f32_to_bf16(src[ditto_position(shape, view, i)]); }
}

#define DITTO_FLOAT_KERNELS(SUFFIX, T)                                                               \
    extern "C" __global__ void ditto_binary_##SUFFIX(ditto_u64 n, int op, DittoShape shape,         \
                                                     DittoView lhs_view, DittoView rhs_view,        \
                                                     const T* lhs, const T* rhs, T* out) {          \
        DITTO_GRID_STRIDE(i, n) { ditto_binary_element<T>(i, op, shape, lhs_view, rhs_view, lhs, rhs, out); } \
    }                                                                                               \
    /* out[i] = f(x[i]) for a dense x; `a`, `b` are the op's scalars, already in T. */               \
    extern "C" __global__ void ditto_unary_##SUFFIX(ditto_u64 n, int op, T a, T b, const T* x,      \
                                                    T* out) {                                       \
        DITTO_GRID_STRIDE(i, n) { out[i] = ditto_unary_op<T>(op, x[i], a, b); }                     \
    }                                                                                               \
    extern "C" __global__ void ditto_relu_backward_##SUFFIX(ditto_u64 n, const T* grad,             \
                                                            const T* input, T* out) {               \
        DITTO_GRID_STRIDE(i, n) { out[i] = ditto_relu_backward_op<T>(grad[i], input[i]); }          \
    }                                                                                               \
    extern "C" __global__ void ditto_axpy_##SUFFIX(ditto_u64 n, T alpha, const T* x, T* s) {        \
        DITTO_GRID_STRIDE(i, n) { s[i] = ditto_axpy_op<T>(s[i], alpha, x[i]); }                     \
    }                                                                                               \
    extern "C" __global__ void ditto_sgd_momentum_##SUFFIX(ditto_u64 n, T weight_decay, T momentum, \
                                                           T keep, T step, int decay, int nesterov, \
                                                           const T* g, T* b, T* p) {                \
        DITTO_GRID_STRIDE(i, n) {                                                                   \
            ditto_sgd_momentum_op<T>(p[i], b[i], g[i], weight_decay, momentum, keep, step, decay,   \
                                     nesterov);                                                     \
        }                                                                                           \
    }                                                                                               \
    extern "C" __global__ void ditto_block_sums_##SUFFIX(ditto_u64 outer, ditto_u64 size,           \
                                                         ditto_u64 inner, ditto_u64 blocks,         \
                                                         const T* x, double* partial) {             \
        DITTO_GRID_STRIDE(t, outer * blocks * inner) { ditto_block_sum<T>(t, size, inner, blocks, x, partial); } \
    }                                                                                               \
    extern "C" __global__ void ditto_finish_sums_##SUFFIX(ditto_u64 outer, ditto_u64 size,          \
                                                          ditto_u64 inner, ditto_u64 blocks,        \
                                                          int mean, const double* partial, T* out) { \
        DITTO_GRID_STRIDE(t, outer * inner) { ditto_finish_sum<T>(t, size, inner, blocks, mean, partial, out); } \
    }                                                                                               \
    extern "C" __global__ void ditto_max_dim_##SUFFIX(ditto_u64 outer, ditto_u64 size,              \
                                                      ditto_u64 inner, const T* x, T* values,       \
                                                      ditto_i64* indices) {                         \
        DITTO_GRID_STRIDE(t, outer * inner) { ditto_max_lane<T>(t, size, inner, x, values, indices); } \
    }                                                                                               \
    extern "C" __global__ void ditto_log_softmax_##SUFFIX(ditto_u64 outer, ditto_u64 size,          \
                                                          ditto_u64 inner, const T* x, T* out) {    \
        DITTO_GRID_STRIDE(t, outer * inner) { ditto_log_softmax_lane<T>(t, size, inner, x, out); }  \
    }                                                                                               \
    extern "C" __global__ void ditto_log_softmax_portable_##SUFFIX(ditto_u64 outer, ditto_u64 size, \
                                                                   ditto_u64 inner, const T* x,     \
                                                                   T* out) {                        \
        DITTO_GRID_STRIDE(t, outer * inner) { ditto_log_softmax_lane<T>(t, size, inner, x, out, true); } \
    }

DITTO_FLOAT_KERNELS(f32, float)
DITTO_FLOAT_KERNELS(f64, double)

// ---- index_add / scatter_add / the one-pass sum: fast (atomics) and deterministic ----
// The *_atomic kernels add in arrival order; the *_owner kernels give each target to one
// work item, so their results do not depend on the launch (see tensor_ops.cuh).
#define DITTO_ACCUMULATE_KERNELS(SUFFIX, T)                                                          \
    extern "C" __global__ void ditto_index_add_atomic_##SUFFIX(ditto_u64 outer, ditto_u64 size,     \
                                                               ditto_u64 inner, ditto_u64 n, T alpha, \
                                                               const ditto_i64* index, const T* src, \
                                                               T* out) {                            \
        DITTO_GRID_STRIDE(t, outer * n * inner) { ditto_index_add_atomic_item<T>(t, size, inner, n, alpha, index, src, out); } \
    }                                                                                               \
    extern "C" __global__ void ditto_index_add_owner_##SUFFIX(ditto_u64 outer, ditto_u64 size,      \
                                                              ditto_u64 inner, ditto_u64 n, T alpha, \
                                                              const ditto_u64* starts,              \
                                                              const ditto_u64* positions,           \
                                                              const T* src, T* out, int fresh) {    \
        DITTO_GRID_STRIDE(t, outer * size * inner) { ditto_index_add_owner_item<T>(t, size, inner, n, alpha, starts, positions, src, out, fresh != 0); } \
    }                                                                                               \
    extern "C" __global__ void ditto_scatter_add_atomic_##SUFFIX(ditto_u64 count, ditto_u64 n,      \
                                                                 ditto_u64 index_step,              \
                                                                 ditto_u64 dst_step, ditto_u64 src_step, \
                                                                 const ditto_u64* bases,            \
                                                                 const ditto_i64* index,            \
                                                                 const T* src, T* out) {            \
        DITTO_GRID_STRIDE(e, count) { ditto_scatter_add_atomic_item<T>(e, n, index_step, dst_step, src_step, bases, index, src, out); } \
    }                                                                                               \
    extern "C" __global__ void ditto_scatter_add_owner_##SUFFIX(ditto_u64 targets_len,               \
                                                                const ditto_u64* targets,           \
                                                                const ditto_u64* starts,            \
                                                                const ditto_u64* sources,           \
                                                                const T* src, T* out) {             \
        DITTO_GRID_STRIDE(u, targets_len) { ditto_scatter_add_owner_item<T>(u, targets, starts, sources, src, out); } \
    }                                                                                               \
    extern "C" __global__ void ditto_sum_atomic_##SUFFIX(ditto_u64 count, ditto_u64 size,           \
                                                         ditto_u64 inner, const T* x,               \
                                                         double* totals) {                          \
        ditto_sum_atomic_walk<T>((ditto_u64)blockIdx.x * blockDim.x + threadIdx.x,                  \
                                 (ditto_u64)gridDim.x * blockDim.x, count, size, inner, x, totals); \
    }

DITTO_ACCUMULATE_KERNELS(f32, float)
DITTO_ACCUMULATE_KERNELS(f64, double)

// ---- gather / one_hot by an i64 index (cross_entropy's picks, on the device) ----
#define DITTO_INDEX_KERNELS(SUFFIX, T)                                                               \
    extern "C" __global__ void ditto_gather_index_##SUFFIX(ditto_u64 n, DittoShape shape,           \
                                                           DittoView src_view, ditto_u64 dim_stride, \
                                                           ditto_u64 dim_size, const ditto_i64* index, \
                                                           const T* src, T* out) {                   \
        DITTO_GRID_STRIDE(i, n) { ditto_gather_index_element<T>(i, shape, src_view, dim_stride, dim_size, index, src, out); } \
    }                                                                                               \
    extern "C" __global__ void ditto_one_hot_##SUFFIX(ditto_u64 n, ditto_u64 classes,               \
                                                      const ditto_i64* index, T* out) {             \
        DITTO_GRID_STRIDE(i, n) { ditto_one_hot_element<T>(i, classes, index, out); }               \
    }

DITTO_INDEX_KERNELS(f32, float)
DITTO_INDEX_KERNELS(f64, double)

// ---- the transformer ops (transformer_ops.cuh): one thread per element or (block, column); ----
// ---- the block-per-row kernels of layer norm and the causal softmax are in row_ops.cu ----
#define DITTO_TRANSFORMER_KERNELS(SUFFIX, T)                                                         \
    /* x + bias[i % c] when bias is not NULL (bias_gelu_tanh: the bias in the same pass) */      \
    extern "C" __global__ void ditto_gelu_tanh_##SUFFIX(ditto_u64 n, T beta, T kappa, int portable, \
                                                        const T* x, const T* bias, ditto_u64 c,     \
                                                        T* out) {                                   \
        DITTO_GRID_STRIDE(i, n) {                                                                   \
            out[i] = ditto_gelu_tanh_op<T>(ditto_biased<T>(x, bias, c, i), beta, kappa, portable != 0); \
        }                                                                                           \
    }                                                                                               \
    extern "C" __global__ void ditto_gelu_tanh_backward_##SUFFIX(ditto_u64 n, T beta, T kappa,      \
                                                                 int portable, const T* grad,       \
                                                                 const T* x, const T* bias,         \
                                                                 ditto_u64 c, T* out) {             \
        DITTO_GRID_STRIDE(i, n) {                                                                   \
            const T xi = ditto_biased<T>(x, bias, c, i);                                            \
            out[i] = ditto_gelu_tanh_backward_op<T>(grad[i], xi, beta, kappa, portable != 0);       \
        }                                                                                           \
    }                                                                                               \
    extern "C" __global__ void ditto_layer_norm_param_partials_##SUFFIX(                             \
        ditto_u64 rows, ditto_u64 c, const T* dy, const T* x, const T* mean, const T* rstd,         \
        double* part_w, double* part_b) {                                                           \
        const ditto_u64 blocks = (rows + DITTO_REDUCE_BLOCK - 1) / DITTO_REDUCE_BLOCK;              \
        DITTO_GRID_STRIDE(item, blocks * c) {                                                       \
            ditto_layer_norm_param_partial<T>(item, rows, c, dy, x, mean, rstd, part_w, part_b);    \
        }                                                                                           \
    }                                                                                               \
    extern "C" __global__ void ditto_layer_norm_param_finish_##SUFFIX(                               \
        ditto_u64 blocks, ditto_u64 c, const double* part_w, const double* part_b, T* dw, T* db) {  \
        DITTO_GRID_STRIDE(j, c) { ditto_layer_norm_param_finish<T>(j, blocks, c, part_w, part_b, dw, db); } \
    }                                                                                               \
    extern "C" __global__ void ditto_adamw_##SUFFIX(ditto_u64 n, DittoAdamW<T> s, const T* g, T* m, \
                                                    T* v, T* p) {                                   \
        DITTO_GRID_STRIDE(i, n) { ditto_adamw_op<T>(p[i], m[i], v[i], g[i], s); }                   \
    }                                                                                               \
    /* Parameter blockIdx.y of the list, its elements in a grid-stride loop over blockIdx.x. */     \
    extern "C" __global__ void ditto_adamw_many_##SUFFIX(DittoAdamWMany<T> a) {                      \
        const unsigned t = blockIdx.y;                                                              \
        for (ditto_u64 i = (ditto_u64)blockIdx.x * blockDim.x + threadIdx.x; i < a.n[t];           \
             i += (ditto_u64)gridDim.x * blockDim.x) {                                              \
            ditto_adamw_op<T>(a.p[t][i], a.m[t][i], a.v[t][i], a.g[t][i], a.s[t]);                 \
        }                                                                                           \
    }                                                                                               \
    /* One thread: the sums are added in parameter order, as on the CPU. */                         \
    extern "C" __global__ void ditto_clip_coefficients_##SUFFIX(ditto_u64 n, double max_norm,       \
                                                                const T* sums, T* out) {            \
        if (blockIdx.x == 0 && threadIdx.x == 0) ditto_clip_coefficients<T>(n, max_norm, sums, out); \
    }

DITTO_TRANSFORMER_KERNELS(f32, float)
DITTO_TRANSFORMER_KERNELS(f64, double)
