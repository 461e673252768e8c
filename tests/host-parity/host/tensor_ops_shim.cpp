// tensor-core's kernel bodies (cuda/tensor_ops.cuh) compiled for the host, behind a C ABI
// for the parity tests (tensor_core::host_parity). Each wrapper runs exactly the loop a
// kernel runs, over every work item in order, calling the same __host__ __device__
// function; so the tests check the GPU code itself against the CPU ops, without a GPU.
//
// Built by tensor-core's build.rs (feature `host-parity`) with -ffp-contract=off: every
// float operation is a separate, correctly rounded SSE instruction, like the GPU's with
// --fmad=false and like Rust's.
#include <cfloat>
#include <vector>

#include "tensor_ops.cuh"

static_assert(FLT_EVAL_METHOD == 0, "f32 arithmetic must happen in f32 (SSE), not x87");

namespace {

template <typename T>
void binary(ditto_u64 n, int op, const DittoShape* shape, const DittoView* lhs_view,
            const DittoView* rhs_view, const T* lhs, const T* rhs, T* out) {
    for (ditto_u64 i = 0; i < n; ++i) ditto_binary_element<T>(i, op, *shape, *lhs_view, *rhs_view, lhs, rhs, out);
}

template <typename T>
void unary(ditto_u64 n, int op, T a, T b, const T* x, T* out) {
    for (ditto_u64 i = 0; i < n; ++i) out[i] = ditto_unary_op<T>(op, x[i], a, b);
}

template <typename T>
void relu_backward(ditto_u64 n, const T* grad, const T* input, T* out) {
    for (ditto_u64 i = 0; i < n; ++i) out[i] = ditto_relu_backward_op<T>(grad[i], input[i]);
}

template <typename T>
void axpy(ditto_u64 n, T alpha, const T* x, T* s) {
    for (ditto_u64 i = 0; i < n; ++i) s[i] = ditto_axpy_op<T>(s[i], alpha, x[i]);
}

// Both phases of a sum, with the partial buffer the Rust launcher allocates.
template <typename T>
void sum(ditto_u64 outer, ditto_u64 size, ditto_u64 inner, int mean, const T* x, T* out) {
    const ditto_u64 blocks = (size + DITTO_REDUCE_BLOCK - 1) / DITTO_REDUCE_BLOCK;
    std::vector<double> partial(outer * blocks * inner);
    for (ditto_u64 t = 0; t < outer * blocks * inner; ++t) ditto_block_sum<T>(t, size, inner, blocks, x, partial.data());
    for (ditto_u64 t = 0; t < outer * inner; ++t) ditto_finish_sum<T>(t, size, inner, blocks, mean, partial.data(), out);
}

template <typename T>
void max_dim(ditto_u64 outer, ditto_u64 size, ditto_u64 inner, const T* x, T* values, ditto_i64* indices) {
    for (ditto_u64 t = 0; t < outer * inner; ++t) ditto_max_lane<T>(t, size, inner, x, values, indices);
}

template <typename T>
void log_softmax(ditto_u64 outer, ditto_u64 size, ditto_u64 inner, const T* x, T* out) {
    for (ditto_u64 t = 0; t < outer * inner; ++t) ditto_log_softmax_lane<T>(t, size, inner, x, out);
}

// The accumulation kernels' loops. The atomic ones run their items in order (the
// stand-in's one-thread-at-a-time schedule); the owner ones forwards or, with
// `reverse`, backwards, which must not change a bit.
template <typename T>
void index_add_atomic(ditto_u64 outer, ditto_u64 size, ditto_u64 inner, ditto_u64 n, T alpha,
                      const ditto_i64* index, const T* src, T* out) {
    for (ditto_u64 t = 0; t < outer * n * inner; ++t) ditto_index_add_atomic_item<T>(t, size, inner, n, alpha, index, src, out);
}

template <typename T>
void index_add_owner(ditto_u64 outer, ditto_u64 size, ditto_u64 inner, ditto_u64 n, T alpha,
                     const ditto_u64* starts, const ditto_u64* positions, const T* src, T* out, int reverse) {
    const ditto_u64 items = outer * size * inner;
    for (ditto_u64 i = 0; i < items; ++i) {
        const ditto_u64 t = reverse ? items - 1 - i : i;
        ditto_index_add_owner_item<T>(t, size, inner, n, alpha, starts, positions, src, out, false);
    }
}

template <typename T>
void scatter_add_atomic(ditto_u64 count, ditto_u64 n, ditto_u64 index_step, ditto_u64 dst_step,
                        ditto_u64 src_step, const ditto_u64* bases, const ditto_i64* index, const T* src,
                        T* out) {
    for (ditto_u64 e = 0; e < count; ++e)
        ditto_scatter_add_atomic_item<T>(e, n, index_step, dst_step, src_step, bases, index, src, out);
}

template <typename T>
void scatter_add_owner(ditto_u64 targets_len, const ditto_u64* targets, const ditto_u64* starts,
                       const ditto_u64* sources, const T* src, T* out, int reverse) {
    for (ditto_u64 i = 0; i < targets_len; ++i) {
        const ditto_u64 u = reverse ? targets_len - 1 - i : i;
        ditto_scatter_add_owner_item<T>(u, targets, starts, sources, src, out);
    }
}

// The one-pass sum with `threads` work items (walks), then the finishing kernel body.
template <typename T>
void sum_atomic(ditto_u64 outer, ditto_u64 size, ditto_u64 inner, ditto_u64 threads, int mean, const T* x,
                T* out) {
    std::vector<double> totals(outer * inner, 0.0);
    const ditto_u64 count = outer * size * inner;
    for (ditto_u64 first = 0; first < threads; ++first)
        ditto_sum_atomic_walk<T>(first, threads, count, size, inner, x, totals.data());
    for (ditto_u64 t = 0; t < outer * inner; ++t) ditto_finish_sum<T>(t, size, inner, 1, mean, totals.data(), out);
}

}  // namespace

extern "C" {

#define DITTO_HOST_OPS(SUFFIX, T)                                                                  \
    void ditto_host_binary_##SUFFIX(ditto_u64 n, int op, const DittoShape* shape,                  \
                                    const DittoView* lhs_view, const DittoView* rhs_view,          \
                                    const T* lhs, const T* rhs, T* out) {                          \
        binary<T>(n, op, shape, lhs_view, rhs_view, lhs, rhs, out);                                \
    }                                                                                              \
    void ditto_host_unary_##SUFFIX(ditto_u64 n, int op, T a, T b, const T* x, T* out) {            \
        unary<T>(n, op, a, b, x, out);                                                             \
    }                                                                                              \
    void ditto_host_relu_backward_##SUFFIX(ditto_u64 n, const T* grad, const T* input, T* out) {   \
        relu_backward<T>(n, grad, input, out);                                                     \
    }                                                                                              \
    void ditto_host_axpy_##SUFFIX(ditto_u64 n, T alpha, const T* x, T* s) { axpy<T>(n, alpha, x, s); } \
    void ditto_host_sum_##SUFFIX(ditto_u64 outer, ditto_u64 size, ditto_u64 inner, int mean,       \
                                 const T* x, T* out) {                                             \
        sum<T>(outer, size, inner, mean, x, out);                                                  \
    }                                                                                              \
    void ditto_host_max_dim_##SUFFIX(ditto_u64 outer, ditto_u64 size, ditto_u64 inner, const T* x, \
                                     T* values, ditto_i64* indices) {                              \
        max_dim<T>(outer, size, inner, x, values, indices);                                        \
    }                                                                                              \
    void ditto_host_log_softmax_##SUFFIX(ditto_u64 outer, ditto_u64 size, ditto_u64 inner,         \
                                         const T* x, T* out) {                                     \
        log_softmax<T>(outer, size, inner, x, out);                                                \
    }                                                                                              \
    void ditto_host_log_softmax_portable_##SUFFIX(ditto_u64 outer, ditto_u64 size, ditto_u64 inner, \
                                                  const T* x, T* out) {                            \
        for (ditto_u64 t = 0; t < outer * inner; ++t)                                              \
            ditto_log_softmax_lane<T>(t, size, inner, x, out, true);                               \
    }

DITTO_HOST_OPS(f32, float)
DITTO_HOST_OPS(f64, double)

#define DITTO_HOST_ACCUMULATE(SUFFIX, T)                                                           \
    void ditto_host_index_add_atomic_##SUFFIX(ditto_u64 outer, ditto_u64 size, ditto_u64 inner,    \
                                              ditto_u64 n, T alpha, const ditto_i64* index,       \
                                              const T* src, T* out) {                             \
        index_add_atomic<T>(outer, size, inner, n, alpha, index, src, out);                        \
    }                                                                                              \
    void ditto_host_index_add_owner_##SUFFIX(ditto_u64 outer, ditto_u64 size, ditto_u64 inner,     \
                                             ditto_u64 n, T alpha, const ditto_u64* starts,       \
                                             const ditto_u64* positions, const T* src, T* out,    \
                                             int reverse) {                                       \
        index_add_owner<T>(outer, size, inner, n, alpha, starts, positions, src, out, reverse);    \
    }                                                                                              \
    void ditto_host_scatter_add_atomic_##SUFFIX(ditto_u64 count, ditto_u64 n, ditto_u64 index_step, \
                                                ditto_u64 dst_step, ditto_u64 src_step,           \
                                                const ditto_u64* bases, const ditto_i64* index,   \
                                                const T* src, T* out) {                           \
        scatter_add_atomic<T>(count, n, index_step, dst_step, src_step, bases, index, src, out);   \
    }                                                                                              \
    void ditto_host_scatter_add_owner_##SUFFIX(ditto_u64 targets_len, const ditto_u64* targets,    \
                                               const ditto_u64* starts, const ditto_u64* sources, \
                                               const T* src, T* out, int reverse) {               \
        scatter_add_owner<T>(targets_len, targets, starts, sources, src, out, reverse);            \
    }                                                                                              \
    void ditto_host_sum_atomic_##SUFFIX(ditto_u64 outer, ditto_u64 size, ditto_u64 inner,          \
                                        ditto_u64 threads, int mean, const T* x, T* out) {         \
        sum_atomic<T>(outer, size, inner, threads, mean, x, out);                                  \
    }

DITTO_HOST_ACCUMULATE(f32, float)
DITTO_HOST_ACCUMULATE(f64, double)

// The gather kernel's body (by position only, so one width suffices to check it).
void ditto_host_gather_32(ditto_u64 n, const DittoShape* shape, const DittoView* view,
                          const unsigned int* src, unsigned int* dst) {
    for (ditto_u64 i = 0; i < n; ++i) dst[i] = src[ditto_position(*shape, *view, i)];
}

// gather / one_hot by an i64 index: the kernels' loops over every output element.
#define DITTO_HOST_INDEX(SUFFIX, T)                                                                \
    void ditto_host_gather_index_##SUFFIX(ditto_u64 n, const DittoShape* shape, const DittoView* view, \
                                          ditto_u64 dim_stride, ditto_u64 dim_size,               \
                                          const ditto_i64* index, const T* src, T* out) {         \
        for (ditto_u64 i = 0; i < n; ++i)                                                          \
            ditto_gather_index_element<T>(i, *shape, *view, dim_stride, dim_size, index, src, out); \
    }                                                                                              \
    void ditto_host_one_hot_##SUFFIX(ditto_u64 n, ditto_u64 classes, const ditto_i64* index, T* out) { \
        for (ditto_u64 i = 0; i < n; ++i) ditto_one_hot_element<T>(i, classes, index, out);        \
    }

DITTO_HOST_INDEX(f32, float)
DITTO_HOST_INDEX(f64, double)

// The fused SGD step's loop over every element.
#define DITTO_HOST_SGD(SUFFIX, T)                                                                  \
    void ditto_host_sgd_momentum_##SUFFIX(ditto_u64 n, T weight_decay, T momentum, T keep, T step, \
                                          int decay, int nesterov, const T* g, T* b, T* p) {      \
        for (ditto_u64 i = 0; i < n; ++i)                                                          \
            ditto_sgd_momentum_op<T>(p[i], b[i], g[i], weight_decay, momentum, keep, step, decay,  \
                                     nesterov);                                                    \
    }

DITTO_HOST_SGD(f32, float)
DITTO_HOST_SGD(f64, double)

}  // extern "C"
