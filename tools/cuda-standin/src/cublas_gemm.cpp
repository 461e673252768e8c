// cuBLAS's gemm entry points, computed on the host: cublas{S,D}gemm_v2 and
// cublas{S,D}gemmStridedBatched, each also in its _64 form, and cublasGemmEx /
// cublasGemmStridedBatchedEx for what ditto's bf16 autocast asks of them: bf16 A and B,
// f32 C, f32 compute (any other combination of types is CUBLAS_STATUS_NOT_SUPPORTED, with
// a message naming it). A bf16 element is widened to f32 exactly, and a product of two
// bf16 values is exact in f32, so the Ex gemm is the f32 gemm below of the widened
// operands, as a GPU's bf16 GEMM with f32 accumulation is up to its order of additions.
//
// Column-major with cuBLAS's argument checks: CUBLAS_STATUS_INVALID_VALUE for a bad
// transpose, a negative size or batch count, or a leading dimension below max(1, rows of
// the operand as stored) (lda >= m or k, ldb >= k or n, ldc >= m), and a quick return for
// m == 0, n == 0 or a batch of 0. Operands must lie inside live allocations of the
// handle's device; one that does not is what a GPU would fault on, so the context gets a
// sticky CUDA_ERROR_ILLEGAL_ADDRESS and the call returns CUBLAS_STATUS_EXECUTION_FAILED.
//
// A strided batch is `batch` gemms, entry i at A + i * strideA, B + i * strideB and
// C + i * strideC (elements; a stride of 0 reuses one operand, as broadcasting does).
// Every entry's operands are checked as the plain gemm checks its own, and each entry is
// computed exactly as a plain gemm of it, so a batch equals its entries' gemms bit for
// bit. cuBLAS leaves C matrices that overlap undefined (entries racing on their writes);
// the stand-in refuses them with CUBLAS_STATUS_INVALID_VALUE, which is stricter than
// cuBLAS (it also refuses entries interleaved through ldc > m, which never happen here).
// The whole batch is one piece of stream work: one host node in a capture, one queued
// piece in the deferred mode, as one kernel sequence on a GPU.
//
// Arithmetic: C(i, j) = alpha * sum + beta * C(i, j), and C not read when beta == 0. The
// sum is formed as a GPU's gemm forms it, not as a CPU loop would: k cut into slices of
// 32, each slice one chain of fused multiply-adds, and the slice sums added pairwise (a
// tree, as split-k reductions do). So its last bits differ from the CPU's gemm and from
// portable arithmetic's single chain (docs/contract.md §14), as real cuBLAS's do, and a
// test can see that the default path depends on the device: ditto's tests compare the
// default matmul within a tolerance. Math modes: CUBLAS_TF32_TENSOR_OP_MATH rounds
// each f32 input to TF32 (10 mantissa bits, to nearest, ties away, like cvt.rna.tf32.f32)
// unless NVIDIA_TF32_OVERRIDE=0; the default, tensor-op and pedantic modes compute in
// plain f32; the BF16x9 and fixed-point emulation modes (designed to match f32 / f64) are
// computed in plain f32 / f64.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <vector>

#include "context.h"
#include "cublas.h"
#include "deferred.h"
#include "graphs.h"
#include "memory.h"

namespace {

using namespace standin;

bool tf32_allowed() {
    const char* v = std::getenv("NVIDIA_TF32_OVERRIDE");
    return v == nullptr || std::strcmp(v, "0") != 0;
}

// f32 rounded to TF32: 10 explicit mantissa bits, to nearest, ties away from zero.
float to_tf32(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0x1000u) & 0xffffe000u;
    std::memcpy(&x, &bits, sizeof bits);
    return x;
}

// One operand's element count as cuBLAS reads it: (cols - 1) * ld + rows.
template <typename I>
uint64_t extent(I rows, I cols, I ld) {
    return static_cast<uint64_t>(cols - 1) * static_cast<uint64_t>(ld) + static_cast<uint64_t>(rows);
}

// `base` moved by `entry * stride` elements of T. Integer arithmetic: an entry outside
// every allocation is a fault to report (see `outside`), not undefined behaviour here.
template <typename T>
T* at_entry(T* base, long long stride, long long entry) {
    const uintptr_t moved = reinterpret_cast<uintptr_t>(base) +
                            static_cast<uintptr_t>(stride * entry) * static_cast<uintptr_t>(sizeof(T));
    return reinterpret_cast<T*>(moved);
}

// sum_p row[p] * column[p] for p in [lo, hi): one fma chain per slice of 32, the slice
// sums added pairwise.
template <typename T>
T split_k_sum(const T* row, const T* column, size_t lo, size_t hi) {
    constexpr size_t kSlice = 32;
    if (hi - lo <= kSlice) {
        T sum = T(0);
        for (size_t p = lo; p < hi; ++p) sum = std::fma(row[p], column[p], sum);
        return sum;
    }
    const size_t slices = (hi - lo + kSlice - 1) / kSlice;
    const size_t mid = lo + (slices / 2) * kSlice;
    return split_k_sum(row, column, lo, mid) + split_k_sum(row, column, mid, hi);
}

// The sizes and scalars of one gemm, shared by every entry of a batch.
template <typename T>
struct GemmShape {
    bool ta, tb, tf32;
    size_t M, N, K, LDA, LDB, LDC;
    T alpha, beta;
};

// A bf16 value (its 16 bits) as the f32 it stands for, exactly.
float bf16_to_f32(uint16_t b) {
    const uint32_t bits = uint32_t(b) << 16;
    float x;
    std::memcpy(&x, &bits, sizeof x);
    return x;
}

// One entry: C = alpha * op(A) op(B) + beta * C (C not read when beta == 0). A and B
// hold T, or bf16 bits (In = uint16_t) with T = float.
template <typename In, typename T>
void gemm_entry(const GemmShape<T>& s, const In* A, const In* B, T* C) {
    auto input = [&s](In stored) -> T {
        if constexpr (std::is_same_v<In, uint16_t>) {
            return bf16_to_f32(stored);
        } else {
            if constexpr (sizeof(T) == 4) {
                if (s.tf32) return to_tf32(stored);
            }
            return stored;
        }
    };
    std::vector<T> rows(s.M * s.K), column(s.K);
    for (size_t i = 0; i < s.M; ++i)
        for (size_t p = 0; p < s.K; ++p) rows[i * s.K + p] = input(s.ta ? A[p + i * s.LDA] : A[i + p * s.LDA]);
    for (size_t j = 0; j < s.N; ++j) {
        for (size_t p = 0; p < s.K; ++p) column[p] = input(s.tb ? B[j + p * s.LDB] : B[p + j * s.LDB]);
        for (size_t i = 0; i < s.M; ++i) {
            const T sum = split_k_sum(rows.data() + i * s.K, column.data(), 0, s.K);
            T value = s.alpha * sum;
            if (s.beta != T(0)) value = value + s.beta * C[i + j * s.LDC];
            C[i + j * s.LDC] = value;
        }
    }
}

// `batch` gemms (entry i at A + i * sa, B + i * sb, C + i * sc); a plain gemm is a batch
// of 1. Checked in the call, computed as one piece of the handle's stream's work. A and
// B hold In (T, or bf16 bits with T = float).
template <typename In, typename T, typename I>
int gemm(const char* call, BlasHandle* h, int transa, int transb, I m, I n, I k, const T* alpha, const In* A, I lda,
         long long sa, const In* B, I ldb, long long sb, const T* beta, T* C, I ldc, long long sc, I batch) {
    if (!live_handle(h)) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, call, "not a live cuBLAS handle");
    if (transa < 0 || transa > 2 || transb < 0 || transb > 2) {
        return blas_fail(CUBLAS_STATUS_INVALID_VALUE, call, "transa %d / transb %d is not N, T or C", transa, transb);
    }
    if (m < 0 || n < 0 || k < 0 || batch < 0) {
        return blas_fail(CUBLAS_STATUS_INVALID_VALUE, call, "m %lld, n %lld, k %lld, batch count %lld: negative size",
                         (long long)m, (long long)n, (long long)k, (long long)batch);
    }
    const bool ta = transa != 0, tb = transb != 0;
    const I a_rows = ta ? k : m, a_cols = ta ? m : k;
    const I b_rows = tb ? n : k, b_cols = tb ? k : n;
    const I one = 1;
    if (lda < std::max(one, a_rows) || ldb < std::max(one, b_rows) || ldc < std::max(one, m)) {
        return blas_fail(CUBLAS_STATUS_INVALID_VALUE, call,
                         "leading dimensions lda %lld (needs >= %lld), ldb %lld (needs >= %lld), ldc %lld (needs >= %lld)",
                         (long long)lda, (long long)std::max(one, a_rows), (long long)ldb,
                         (long long)std::max(one, b_rows), (long long)ldc, (long long)std::max(one, m));
    }
    if (alpha == nullptr || beta == nullptr) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, call, "NULL alpha or beta");
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    const uint64_t c_extent = extent(m, n, ldc);
    if (batch > 1 && static_cast<uint64_t>(sc < 0 ? -sc : sc) < c_extent) {
        return blas_fail(CUBLAS_STATUS_INVALID_VALUE, call,
                         "strideC %lld is smaller than one C matrix (%" PRIu64
                         " elements): the entries' writes would overlap (a race on a GPU)",
                         sc, c_extent);
    }
    Context* ctx = nullptr;
    {
        std::lock_guard<std::mutex> guard(state_lock());
        if (current_context() != h->ctx) {
            return blas_fail(CUBLAS_STATUS_EXECUTION_FAILED, call,
                             "the handle belongs to device %d, but %s is current (cuBLAS needs the device of the handle "
                             "to be current)",
                             h->ctx->device, current_context() == nullptr ? "no context" : "the context of another device");
        }
        if (resolve_stream(h->stream, call, true, &ctx) != CUDA_SUCCESS) {
            return blas_fail(CUBLAS_STATUS_EXECUTION_FAILED, call, "the stream or context of the handle is unusable");
        }
    }
    const int device = ctx->device;
    // A device-side operand outside live memory of this device: a GPU would fault.
    auto outside = [&](const void* p, uint64_t elements, size_t element_bytes, const char* what,
                       long long entry) -> bool {
        Allocation a;
        const CUdeviceptr ptr = reinterpret_cast<CUdeviceptr>(p);
        if (check_device_range(ptr, elements * element_bytes, call, what, &a) == CUDA_SUCCESS && a.device == device) {
            return false;
        }
        char reason[240];
        if (batch > 1) {
            std::snprintf(reason, sizeof reason,
                          "%s: %s of entry %lld (%" PRIu64 " elements at %p) is not inside the memory of device %d",
                          call, what, entry, elements, p, device);
        } else {
            std::snprintf(reason, sizeof reason, "%s: %s (%" PRIu64 " elements at %p) is not inside the memory of device %d",
                          call, what, elements, p, device);
        }
        std::lock_guard<std::mutex> guard(state_lock());
        poison(ctx, CUDA_ERROR_ILLEGAL_ADDRESS, reason);
        blas_fail(CUBLAS_STATUS_EXECUTION_FAILED, call, "%s", reason);
        return true;
    };
    if (h->pointer_mode == 1 &&
        (outside(alpha, 1, sizeof(T), "alpha", 0) || outside(beta, 1, sizeof(T), "beta", 0))) {
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    const T a = *alpha, b = *beta;
    const bool reads_ab = k > 0 && a != T(0);
    const long long entries = static_cast<long long>(batch);
    for (long long e = 0; e < entries; ++e) {
        if (reads_ab && (outside(at_entry(A, sa, e), extent(a_rows, a_cols, lda), sizeof(In), "A", e) ||
                         outside(at_entry(B, sb, e), extent(b_rows, b_cols, ldb), sizeof(In), "B", e))) {
            return CUBLAS_STATUS_EXECUTION_FAILED;
        }
        if (outside(at_entry(C, sc, e), c_extent, sizeof(T), "C", e)) return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    if (h->workspace != 0 && outside(reinterpret_cast<const void*>(h->workspace), h->workspace_bytes, 1,
                                     "the workspace (cublasSetWorkspace)", 0)) {
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    GemmShape<T> shape{ta, tb, false, static_cast<size_t>(m), static_cast<size_t>(n), reads_ab ? static_cast<size_t>(k) : 0,
                       static_cast<size_t>(lda), static_cast<size_t>(ldb), static_cast<size_t>(ldc), a, b};
    if constexpr (std::is_same_v<In, float>) shape.tf32 = (h->math_mode & 0xf) == 3 && tf32_allowed();
    auto compute = [=]() {
        for (long long e = 0; e < entries; ++e) gemm_entry(shape, at_entry(A, sa, e), at_entry(B, sb, e), at_entry(C, sc, e));
    };
    {
        // On a capturing stream the gemm is recorded, to run at each replay (graphs.h).
        std::lock_guard<std::mutex> guard(state_lock());
        if (Capture* capture = capture_of(h->stream)) {
            if (h->workspace == 0 && h->workspace_capture != capture->serial) {
                CUdeviceptr own = 0;
                if (record_alloc(capture, device, kCaptureWorkspaceBytes, call, &own) != CUDA_SUCCESS) {
                    return blas_fail(CUBLAS_STATUS_ALLOC_FAILED, call, "its workspace could not be allocated");
                }
                h->workspace_capture = capture->serial;
            }
            if (record_host(capture, compute, call) != CUDA_SUCCESS) {
                return blas_fail(CUBLAS_STATUS_EXECUTION_FAILED, call, "the stream's capture was invalidated");
            }
            return CUBLAS_STATUS_SUCCESS;
        }
    }
    if (defer_stream_work()) {
        defer(ctx, h->stream, call, compute);  // runs when the queue reaches it (deferred.h)
        return CUBLAS_STATUS_SUCCESS;
    }
    compute();
    return CUBLAS_STATUS_SUCCESS;
}

// cudaDataType and cublasComputeType_t values (library_types.h, cublas_api.h).
enum : int { kDataR32F = 0, kDataR16BF = 14 };
enum : int { kCompute32F = 68, kCompute32FPedantic = 69 };

// The Ex entry points: only bf16 A and B into f32 C with f32 compute (file comment).
template <typename I>
int gemm_ex(const char* call, BlasHandle* h, int ta, int tb, I m, I n, I k, const void* alpha, const void* A,
            int a_type, I lda, long long sa, const void* B, int b_type, I ldb, long long sb, const void* beta, void* C,
            int c_type, I ldc, long long sc, I batch, int compute) {
    if (a_type != kDataR16BF || b_type != kDataR16BF || c_type != kDataR32F ||
        (compute != kCompute32F && compute != kCompute32FPedantic)) {
        return blas_fail(CUBLAS_STATUS_NOT_SUPPORTED, call,
                         "A type %d, B type %d, C type %d, compute type %d: the stand-in computes bf16 A and B "
                         "(CUDA_R_16BF = 14) into f32 C (CUDA_R_32F = 0) with CUBLAS_COMPUTE_32F(_PEDANTIC) only",
                         a_type, b_type, c_type, compute);
    }
    return gemm<uint16_t, float, I>(call, h, ta, tb, m, n, k, static_cast<const float*>(alpha),
                                    static_cast<const uint16_t*>(A), lda, sa, static_cast<const uint16_t*>(B), ldb, sb,
                                    static_cast<const float*>(beta), static_cast<float*>(C), ldc, sc, batch);
}

}  // namespace

extern "C" {

typedef BlasHandle* cublasHandle_t;

int cublasSgemm_v2(cublasHandle_t h, int ta, int tb, int m, int n, int k, const float* alpha, const float* A,
                   int lda, const float* B, int ldb, const float* beta, float* C, int ldc) {
    return gemm<float, float, int>("cublasSgemm_v2", h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

int cublasDgemm_v2(cublasHandle_t h, int ta, int tb, int m, int n, int k, const double* alpha, const double* A,
                   int lda, const double* B, int ldb, const double* beta, double* C, int ldc) {
    return gemm<double, double, int>("cublasDgemm_v2", h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

int cublasSgemm_v2_64(cublasHandle_t h, int ta, int tb, int64_t m, int64_t n, int64_t k, const float* alpha,
                      const float* A, int64_t lda, const float* B, int64_t ldb, const float* beta, float* C,
                      int64_t ldc) {
    return gemm<float, float, int64_t>("cublasSgemm_v2_64", h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0,
                                1);
}

int cublasDgemm_v2_64(cublasHandle_t h, int ta, int tb, int64_t m, int64_t n, int64_t k, const double* alpha,
                      const double* A, int64_t lda, const double* B, int64_t ldb, const double* beta, double* C,
                      int64_t ldc) {
    return gemm<double, double, int64_t>("cublasDgemm_v2_64", h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0,
                                 1);
}

int cublasSgemmStridedBatched(cublasHandle_t h, int ta, int tb, int m, int n, int k, const float* alpha,
                              const float* A, int lda, long long sa, const float* B, int ldb, long long sb,
                              const float* beta, float* C, int ldc, long long sc, int batch) {
    return gemm<float, float, int>("cublasSgemmStridedBatched", h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C,
                            ldc, sc, batch);
}

int cublasDgemmStridedBatched(cublasHandle_t h, int ta, int tb, int m, int n, int k, const double* alpha,
                              const double* A, int lda, long long sa, const double* B, int ldb, long long sb,
                              const double* beta, double* C, int ldc, long long sc, int batch) {
    return gemm<double, double, int>("cublasDgemmStridedBatched", h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C,
                             ldc, sc, batch);
}

int cublasSgemmStridedBatched_64(cublasHandle_t h, int ta, int tb, int64_t m, int64_t n, int64_t k,
                                 const float* alpha, const float* A, int64_t lda, long long sa, const float* B,
                                 int64_t ldb, long long sb, const float* beta, float* C, int64_t ldc, long long sc,
                                 int64_t batch) {
    return gemm<float, float, int64_t>("cublasSgemmStridedBatched_64", h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb,
                                beta, C, ldc, sc, batch);
}

int cublasDgemmStridedBatched_64(cublasHandle_t h, int ta, int tb, int64_t m, int64_t n, int64_t k,
                                 const double* alpha, const double* A, int64_t lda, long long sa, const double* B,
                                 int64_t ldb, long long sb, const double* beta, double* C, int64_t ldc, long long sc,
                                 int64_t batch) {
    return gemm<double, double, int64_t>("cublasDgemmStridedBatched_64", h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb,
                                 beta, C, ldc, sc, batch);
}

int cublasGemmEx(cublasHandle_t h, int ta, int tb, int m, int n, int k, const void* alpha, const void* A, int a_type,
                 int lda, const void* B, int b_type, int ldb, const void* beta, void* C, int c_type, int ldc, int compute,
                 int /*algo: every algorithm computes the same here*/) {
    return gemm_ex<int>("cublasGemmEx", h, ta, tb, m, n, k, alpha, A, a_type, lda, 0, B, b_type, ldb, 0, beta, C, c_type,
                        ldc, 0, 1, compute);
}

int cublasGemmStridedBatchedEx(cublasHandle_t h, int ta, int tb, int m, int n, int k, const void* alpha, const void* A,
                               int a_type, int lda, long long sa, const void* B, int b_type, int ldb, long long sb,
                               const void* beta, void* C, int c_type, int ldc, long long sc, int batch, int compute,
                               int /*algo*/) {
    return gemm_ex<int>("cublasGemmStridedBatchedEx", h, ta, tb, m, n, k, alpha, A, a_type, lda, sa, B, b_type, ldb, sb,
                        beta, C, c_type, ldc, sc, batch, compute);
}

}  // extern "C"
