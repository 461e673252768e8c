// ditto's tensor ops on CUDA: the kernels behind Tensor's elementwise ops, reductions
// and log_softmax when a tensor lives on a GPU (matmul goes to cuBLAS instead).
//
// Determinism: every output element is computed by exactly one thread, from its own
// inputs, in a fixed order; no atomics, no shared-memory tree reductions. So no value
// depends on the grid, the block size or the GPU model. Sums follow tensor-core's
// documented order (consecutive blocks of DITTO_REDUCE_BLOCK summed left to right in
// double, then the block sums left to right), which makes them bit-identical to the CPU.
// Compiled by NVRTC with --fmad=false, so `a * b + c` is a multiply then an add, as on
// the CPU. exp / log / pow are CUDA's libdevice functions: the same on every GPU, but
// not bit-equal to the CPU's libm.
//
// Kernels are grid-stride loops over a 64-bit element count, so any launch geometry
// computes the same values.

#define DITTO_MAX_RANK 8
#define DITTO_REDUCE_BLOCK 1024ULL

typedef unsigned long long u64;
typedef long long i64;

// The logical shape of the elements a kernel walks, in row-major order.
struct DittoShape {
    u64 rank;
    u64 dims[DITTO_MAX_RANK];
};

// Where logical element `i` of a DittoShape lives in one operand's buffer: `offset` plus
// the sum of index * stride over the dimensions (stride 0 repeats a broadcast operand).
struct DittoView {
    u64 offset;
    u64 strides[DITTO_MAX_RANK];
};

__device__ __forceinline__ u64 ditto_position(const DittoShape& shape, const DittoView& view, u64 i) {
    u64 position = view.offset;
    for (int d = (int)shape.rank - 1; d >= 0; --d) {
        const u64 size = shape.dims[d];
        position += (i % size) * view.strides[d];
        i /= size;
    }
    return position;
}

#define DITTO_GRID_STRIDE(i, n) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (u64)gridDim.x * blockDim.x)

// ---- layout: gather a view into a dense buffer, scatter a dense buffer into a view ----
// By element width, so one kernel serves every dtype of that size.

#define DITTO_LAYOUT_KERNELS(WIDTH, T)                                                              \
    extern "C" __global__ void ditto_gather_##WIDTH(u64 n, DittoShape shape, DittoView view,       \
                                                    const T* src, T* dst) {                        \
        DITTO_GRID_STRIDE(i, n) { dst[i] = src[ditto_position(shape, view, i)]; }                  \
    }                                                                                              \
    extern "C" __global__ void ditto_scatter_##WIDTH(u64 n, DittoShape shape, DittoView view,      \
                                                     const T* src, T* dst) {                       \
        DITTO_GRID_STRIDE(i, n) { dst[ditto_position(shape, view, i)] = src[i]; }                  \
    }

DITTO_LAYOUT_KERNELS(8, unsigned char)
DITTO_LAYOUT_KERNELS(16, unsigned short)
DITTO_LAYOUT_KERNELS(32, unsigned int)
DITTO_LAYOUT_KERNELS(64, u64)

// ---- elementwise ----
// Op codes; tensor-core's cuda_ops module uses the same numbers.
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

__device__ __forceinline__ float ditto_exp(float x) { return expf(x); }
__device__ __forceinline__ double ditto_exp(double x) { return exp(x); }
__device__ __forceinline__ float ditto_log(float x) { return logf(x); }
__device__ __forceinline__ double ditto_log(double x) { return log(x); }
__device__ __forceinline__ float ditto_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double ditto_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float ditto_pow(float x, float e) { return powf(x, e); }
__device__ __forceinline__ double ditto_pow(double x, double e) { return pow(x, e); }

template <typename T>
__device__ __forceinline__ T ditto_binary_op(int op, T a, T b) {
    switch (op) {
        case DITTO_ADD: return a + b;
        case DITTO_SUB: return a - b;
        case DITTO_MUL: return a * b;
        default: return a / b;
    }
}

template <typename T>
__device__ __forceinline__ T ditto_unary_op(int op, T x, T a, T b) {
    switch (op) {
        case DITTO_RELU: return (x > (T)0 || x != x) ? x : (T)0;  // NaN stays NaN
        case DITTO_EXP: return ditto_exp(x);
        case DITTO_LOG: return ditto_log(x);
        case DITTO_SQRT: return ditto_sqrt(x);
        case DITTO_POW: return ditto_pow(x, a);
        case DITTO_NEG: return -x;
        case DITTO_AFFINE: return x * a + b;  // two roundings: --fmad=false
        case DITTO_MUL_SCALAR: return x * a;
        default: return x + a;
    }
}

#define DITTO_FLOAT_KERNELS(SUFFIX, T)                                                             \
    /* out[i] = lhs[view_l(i)] op rhs[view_r(i)]: broadcasting through zero strides. */             \
    extern "C" __global__ void ditto_binary_##SUFFIX(u64 n, int op, DittoShape shape,              \
                                                     DittoView lhs_view, DittoView rhs_view,       \
                                                     const T* lhs, const T* rhs, T* out) {         \
        DITTO_GRID_STRIDE(i, n) {                                                                  \
            out[i] = ditto_binary_op<T>(op, lhs[ditto_position(shape, lhs_view, i)],               \
                                        rhs[ditto_position(shape, rhs_view, i)]);                  \
        }                                                                                          \
    }                                                                                              \
    /* out[i] = f(x[i]) for a dense x; `a`, `b` are the op's scalars, already in T. */              \
    extern "C" __global__ void ditto_unary_##SUFFIX(u64 n, int op, T a, T b, const T* x, T* out) { \
        DITTO_GRID_STRIDE(i, n) { out[i] = ditto_unary_op<T>(op, x[i], a, b); }                    \
    }                                                                                              \
    extern "C" __global__ void ditto_relu_backward_##SUFFIX(u64 n, const T* grad, const T* input,  \
                                                            T* out) {                              \
        DITTO_GRID_STRIDE(i, n) { out[i] = input[i] > (T)0 ? grad[i] : (T)0; }                     \
    }                                                                                              \
    /* s[i] = s[i] + alpha * x[i]: a multiply then an add, as on the CPU. */                        \
    extern "C" __global__ void ditto_axpy_##SUFFIX(u64 n, T alpha, const T* x, T* s) {            \
        DITTO_GRID_STRIDE(i, n) { s[i] = s[i] + alpha * x[i]; }                                    \
    }                                                                                              \
    DITTO_REDUCE_KERNELS(SUFFIX, T)

// ---- reductions over one dimension of a dense (outer, size, inner) tensor ----
// Element (o, k, j) sits at x[(o * size + k) * inner + j]; a lane is (o, j).

#define DITTO_REDUCE_KERNELS(SUFFIX, T)                                                            \
    /* Phase 1: partial[(o * blocks + b) * inner + j] = sum of block b of lane (o, j). */           \
    extern "C" __global__ void ditto_block_sums_##SUFFIX(u64 outer, u64 size, u64 inner,           \
                                                         u64 blocks, const T* x,                   \
                                                         double* partial) {                        \
        DITTO_GRID_STRIDE(t, outer * blocks * inner) {                                             \
            const u64 j = t % inner, b = (t / inner) % blocks, o = t / (inner * blocks);           \
            const u64 end = min(size, (b + 1) * DITTO_REDUCE_BLOCK);                               \
            double block = 0.0;                                                                    \
            for (u64 k = b * DITTO_REDUCE_BLOCK; k < end; ++k) block += (double)x[(o * size + k) * inner + j]; \
            partial[t] = block;                                                                    \
        }                                                                                          \
    }                                                                                              \
    /* Phase 2: out[o * inner + j] = the block sums of lane (o, j) left to right, divided by    */ \
    /* `size` for a mean, rounded once to T.                                                    */ \
    extern "C" __global__ void ditto_finish_sums_##SUFFIX(u64 outer, u64 size, u64 inner,          \
                                                          u64 blocks, int mean,                    \
                                                          const double* partial, T* out) {         \
        DITTO_GRID_STRIDE(t, outer * inner) {                                                      \
            const u64 j = t % inner, o = t / inner;                                                \
            double total = 0.0;                                                                    \
            for (u64 b = 0; b < blocks; ++b) total += partial[(o * blocks + b) * inner + j];       \
            if (mean) total = total / (double)size;                                                \
            out[t] = (T)total;                                                                     \
        }                                                                                          \
    }                                                                                              \
    /* The first maximum of each lane and its index; NaN beats everything, the first NaN wins. */  \
    extern "C" __global__ void ditto_max_dim_##SUFFIX(u64 outer, u64 size, u64 inner, const T* x,  \
                                                      T* values, i64* indices) {                   \
        DITTO_GRID_STRIDE(t, outer * inner) {                                                      \
            const u64 j = t % inner, o = t / inner;                                                \
            const T* lane = x + o * size * inner + j;                                              \
            u64 best = 0;                                                                          \
            T m = lane[0];                                                                         \
            for (u64 k = 1; k < size && m == m; ++k) {                                             \
                const T v = lane[k * inner];                                                       \
                if (v != v || v > m) { m = v; best = k; }                                          \
            }                                                                                      \
            values[t] = m;                                                                         \
            indices[t] = (i64)best;                                                                \
        }                                                                                          \
    }                                                                                              \
    /* log_softmax of each lane, in the steps of Tensor::log_softmax: the maximum m, then      */ \
    /* z = sum exp(x - m) (exp in T, the sum in the blocked double order), l = log(z) in       */ \
    /* double rounded to T, out = (x - m) - l.                                                  */ \
    extern "C" __global__ void ditto_log_softmax_##SUFFIX(u64 outer, u64 size, u64 inner,          \
                                                          const T* x, T* out) {                    \
        DITTO_GRID_STRIDE(t, outer * inner) {                                                      \
            const u64 j = t % inner, o = t / inner;                                                \
            const T* lane = x + o * size * inner + j;                                              \
            T* dst = out + o * size * inner + j;                                                   \
            T m = lane[0];                                                                         \
            for (u64 k = 1; k < size && m == m; ++k) {                                             \
                const T v = lane[k * inner];                                                       \
                if (v != v || v > m) m = v;                                                        \
            }                                                                                      \
            double total = 0.0;                                                                    \
            for (u64 start = 0; start < size; start += DITTO_REDUCE_BLOCK) {                       \
                const u64 end = min(size, start + DITTO_REDUCE_BLOCK);                             \
                double block = 0.0;                                                                \
                for (u64 k = start; k < end; ++k) block += (double)ditto_exp((T)(lane[k * inner] - m)); \
                total += block;                                                                    \
            }                                                                                      \
            const T l = (T)log(total);                                                             \
            for (u64 k = 0; k < size; ++k) dst[k * inner] = (lane[k * inner] - m) - l;             \
        }                                                                                          \
    }

DITTO_FLOAT_KERNELS(f32, float)
DITTO_FLOAT_KERNELS(f64, double)
