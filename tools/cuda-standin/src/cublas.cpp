// cuBLAS: handles and the gemm entry points, computed on the host.
//
// Column-major with cuBLAS's argument checks: CUBLAS_STATUS_INVALID_VALUE for a bad
// transpose, a negative size, or a leading dimension below max(1, rows of the operand as
// stored) (lda >= m or k, ldb >= k or n, ldc >= m), and a quick return for m == 0 or
// n == 0. A handle belongs to the device that was current when it was created, and using
// it while another device is current fails (cuBLAS requires the handle's device to be
// current). Operands must lie inside live allocations of that device; one that does not is
// what a GPU would fault on, so the context gets a sticky CUDA_ERROR_ILLEGAL_ADDRESS and
// the call returns CUBLAS_STATUS_EXECUTION_FAILED.
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
#include <cmath>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "context.h"
#include "deferred.h"
#include "errors.h"
#include "graphs.h"
#include "memory.h"

// The driver calls cublasCreate makes when no context is current (memory_api.cpp and
// context.cpp define them).
extern "C" CUresult cuInit(unsigned int flags);
extern "C" CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice device);
extern "C" CUresult cuCtxSetCurrent(CUcontext ctx);

namespace {

using namespace standin;

enum : int {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
};

struct Handle {
    Context* ctx;
    CUstream stream;  // as given to cublasSetStream (NULL: the default stream)
    int math_mode = 0;
    int pointer_mode = 0;  // 0 host, 1 device
    // As given to cublasSetWorkspace (0: none, cuBLAS then allocates its own).
    CUdeviceptr workspace = 0;
    size_t workspace_bytes = 0;
    // The capture (Capture::serial) whose graph holds this handle's own workspace.
    unsigned long long workspace_capture = 0;
};

// What cuBLAS 12.2 and later do on a capturing stream when no workspace was set
// (PyTorch issue 113994): allocate their workspace with cudaMallocAsync, once per
// capture, which the capture records as an allocation node the graph never frees. The
// size matters little to the rule; this is cuBLAS's recommendation for Hopper.
constexpr size_t kCaptureWorkspaceBytes = size_t(32) << 20;

std::set<Handle*>& handles() {
    static std::set<Handle*> all;
    return all;
}

// Reports a cuBLAS failure (cuBLAS has no per-call message channel, so it is printed).
int blas_fail(int status, const char* call, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
int blas_fail(int status, const char* call, const char* fmt, ...) {
    char detail[600];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(detail, sizeof detail, fmt, args);
    va_end(args);
    say("%s failed with status %d: %s", call, status, detail);
    return status;
}

bool live(Handle* h) {
    std::lock_guard<std::mutex> guard(state_lock());
    return handles().count(h) != 0;
}

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

template <typename T, typename I>
int gemm(const char* call, Handle* h, int transa, int transb, I m, I n, I k, const T* alpha, const T* A, I lda,
         const T* B, I ldb, const T* beta, T* C, I ldc) {
    if (!live(h)) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, call, "not a live cuBLAS handle");
    if (transa < 0 || transa > 2 || transb < 0 || transb > 2) {
        return blas_fail(CUBLAS_STATUS_INVALID_VALUE, call, "transa %d / transb %d is not N, T or C", transa, transb);
    }
    if (m < 0 || n < 0 || k < 0) {
        return blas_fail(CUBLAS_STATUS_INVALID_VALUE, call, "m %lld, n %lld, k %lld: negative size", (long long)m,
                         (long long)n, (long long)k);
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
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
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
    auto outside = [&](const void* p, uint64_t elements, const char* what) -> bool {
        Allocation a;
        const CUdeviceptr ptr = reinterpret_cast<CUdeviceptr>(p);
        if (check_device_range(ptr, elements * sizeof(T), call, what, &a) == CUDA_SUCCESS && a.device == device) {
            return false;
        }
        char reason[200];
        std::snprintf(reason, sizeof reason, "%s: %s (%" PRIu64 " elements at %p) is not inside the memory of device %d",
                      call, what, elements, p, device);
        std::lock_guard<std::mutex> guard(state_lock());
        poison(ctx, CUDA_ERROR_ILLEGAL_ADDRESS, reason);
        blas_fail(CUBLAS_STATUS_EXECUTION_FAILED, call, "%s", reason);
        return true;
    };
    if (h->pointer_mode == 1 && (outside(alpha, 1, "alpha") || outside(beta, 1, "beta"))) {
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    const T a = *alpha, b = *beta;
    const bool reads_ab = k > 0 && a != T(0);
    if (reads_ab && (outside(A, extent(a_rows, a_cols, lda), "A") || outside(B, extent(b_rows, b_cols, ldb), "B"))) {
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    if (outside(C, extent(m, n, ldc), "C")) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (h->workspace != 0 && outside(reinterpret_cast<const void*>(h->workspace), h->workspace_bytes / sizeof(T),
                                     "the workspace (cublasSetWorkspace)")) {
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    bool tf32 = false;
    if constexpr (sizeof(T) == 4) tf32 = (h->math_mode & 0xf) == 3 && tf32_allowed();
    auto input = [tf32](T x) -> T {
        if constexpr (sizeof(T) == 4) {
            if (tf32) return to_tf32(x);
        }
        return x;
    };
    const size_t M = static_cast<size_t>(m), N = static_cast<size_t>(n), K = reads_ab ? static_cast<size_t>(k) : 0;
    const size_t LDA = static_cast<size_t>(lda), LDB = static_cast<size_t>(ldb), LDC = static_cast<size_t>(ldc);
    auto compute = [=]() {
        std::vector<T> rows(M * K), column(K);
        for (size_t i = 0; i < M; ++i)
            for (size_t p = 0; p < K; ++p) rows[i * K + p] = input(ta ? A[p + i * LDA] : A[i + p * LDA]);
        for (size_t j = 0; j < N; ++j) {
            for (size_t p = 0; p < K; ++p) column[p] = input(tb ? B[j + p * LDB] : B[p + j * LDB]);
            for (size_t i = 0; i < M; ++i) {
                const T sum = split_k_sum(rows.data() + i * K, column.data(), 0, K);
                T value = a * sum;
                if (b != T(0)) value = value + b * C[i + j * LDC];
                C[i + j * LDC] = value;
            }
        }
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

}  // namespace

extern "C" {

typedef Handle* cublasHandle_t;

// What the generated stubs of unimplemented cuBLAS calls return.
int ditto_standin_cublas_unimplemented(const char* call) {
    return blas_fail(CUBLAS_STATUS_NOT_SUPPORTED, call, "%s is not implemented by the stand-in", call);
}

// Like cuBLAS, the handle belongs to the current device; with none current, the CUDA
// runtime's rule applies: device 0's primary context becomes current.
int cublasCreate_v2(cublasHandle_t* out) {
    if (out == nullptr) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate_v2", "NULL pointer");
    Context* ctx = current_context();
    if (ctx == nullptr) {
        CUcontext primary = nullptr;
        if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&primary, 0) != CUDA_SUCCESS ||
            cuCtxSetCurrent(primary) != CUDA_SUCCESS) {
            return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasCreate_v2", "no CUDA device to create it on");
        }
        ctx = primary;
    }
    std::lock_guard<std::mutex> guard(state_lock());
    Handle* h = new Handle{ctx, nullptr};
    handles().insert(h);
    *out = h;
    return CUBLAS_STATUS_SUCCESS;
}

int cublasDestroy_v2(cublasHandle_t h) {
    std::lock_guard<std::mutex> guard(state_lock());
    if (handles().erase(h) == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

int cublasSetStream_v2(cublasHandle_t h, CUstream stream) {
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

int cublasGetStream_v2(cublasHandle_t h, CUstream* stream) {
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *stream = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}

int cublasSetMathMode(cublasHandle_t h, int mode) {
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    const int base = mode & ~16;  // 16: DISALLOW_REDUCED_PRECISION_REDUCTION, a flag
    if (base != 0 && base != 1 && base != 2 && base != 3 && base != 4 && base != 8) {
        return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetMathMode", "unknown math mode %d", mode);
    }
    h->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

int cublasGetMathMode(cublasHandle_t h, int* mode) {
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = h->math_mode;
    return CUBLAS_STATUS_SUCCESS;
}

int cublasSetPointerMode_v2(cublasHandle_t h, int mode) {
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != 0 && mode != 1) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetPointerMode_v2", "mode %d", mode);
    h->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

int cublasGetPointerMode_v2(cublasHandle_t h, int* mode) {
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = h->pointer_mode;
    return CUBLAS_STATUS_SUCCESS;
}

// The stand-in computes in place of cuBLAS 13.0.
int cublasGetVersion_v2(cublasHandle_t h, int* version) {
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *version = 130000;
    return CUBLAS_STATUS_SUCCESS;
}

// The host needs no workspace, but which one is set decides what a capture records: with
// none, a gemm on a capturing stream allocates one (kCaptureWorkspaceBytes); with one,
// every gemm checks that it is still live memory of the handle's device.
int cublasSetWorkspace_v2(cublasHandle_t h, void* workspace, size_t bytes) {
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    const CUdeviceptr ptr = reinterpret_cast<CUdeviceptr>(workspace);
    if (ptr != 0) {
        Allocation a;
        if (bytes == 0 || check_device_range(ptr, bytes, "cublasSetWorkspace_v2", "workspace", &a) != CUDA_SUCCESS ||
            a.device != h->ctx->device) {
            return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetWorkspace_v2",
                             "%zu bytes at %p are not live memory of device %d", bytes, workspace, h->ctx->device);
        }
    }
    h->workspace = ptr;
    h->workspace_bytes = ptr == 0 ? 0 : bytes;
    return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(int status) {
    switch (status) {
        case 0: return "CUBLAS_STATUS_SUCCESS";
        case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
        case 7: return "CUBLAS_STATUS_INVALID_VALUE";
        case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
        case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
        default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

const char* cublasGetStatusString(int status) { return cublasGetStatusName(status); }

int cublasSgemm_v2(cublasHandle_t h, int ta, int tb, int m, int n, int k, const float* alpha, const float* A,
                   int lda, const float* B, int ldb, const float* beta, float* C, int ldc) {
    return gemm<float, int>("cublasSgemm_v2", h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

int cublasDgemm_v2(cublasHandle_t h, int ta, int tb, int m, int n, int k, const double* alpha, const double* A,
                   int lda, const double* B, int ldb, const double* beta, double* C, int ldc) {
    return gemm<double, int>("cublasDgemm_v2", h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

int cublasSgemm_v2_64(cublasHandle_t h, int ta, int tb, int64_t m, int64_t n, int64_t k, const float* alpha,
                      const float* A, int64_t lda, const float* B, int64_t ldb, const float* beta, float* C,
                      int64_t ldc) {
    return gemm<float, int64_t>("cublasSgemm_v2_64", h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

int cublasDgemm_v2_64(cublasHandle_t h, int ta, int tb, int64_t m, int64_t n, int64_t k, const double* alpha,
                      const double* A, int64_t lda, const double* B, int64_t ldb, const double* beta, double* C,
                      int64_t ldc) {
    return gemm<double, int64_t>("cublasDgemm_v2_64", h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // extern "C"
