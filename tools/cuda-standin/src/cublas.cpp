// cuBLAS: handles, their stream, math and pointer modes and workspace, status names. The
// gemm entry points are in cublas_gemm.cpp.
//
// A handle belongs to the device that was current when it was created, and using it
// while another device is current fails (cuBLAS requires the handle's device to be
// current).
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>

#include "context.h"
#include "cublas.h"
#include "errors.h"
#include "memory.h"

// The driver calls cublasCreate makes when no context is current (memory_api.cpp and
// context.cpp define them).
extern "C" CUresult cuInit(unsigned int flags);
extern "C" CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice device);
extern "C" CUresult cuCtxSetCurrent(CUcontext ctx);

namespace {

using namespace standin;

std::set<BlasHandle*>& handles() {
    static std::set<BlasHandle*> all;
    return all;
}

}  // namespace

namespace standin {

int blas_fail(int status, const char* call, const char* fmt, ...) {
    char detail[600];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(detail, sizeof detail, fmt, args);
    va_end(args);
    say("%s failed with status %d: %s", call, status, detail);
    return status;
}

bool live_handle(BlasHandle* h) {
    std::lock_guard<std::mutex> guard(state_lock());
    return handles().count(h) != 0;
}

}  // namespace standin

extern "C" {

typedef BlasHandle* cublasHandle_t;

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
    BlasHandle* h = new BlasHandle{ctx, nullptr};
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
    if (!live_handle(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

int cublasGetStream_v2(cublasHandle_t h, CUstream* stream) {
    if (!live_handle(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *stream = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}

int cublasSetMathMode(cublasHandle_t h, int mode) {
    if (!live_handle(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    const int base = mode & ~16;  // 16: DISALLOW_REDUCED_PRECISION_REDUCTION, a flag
    if (base != 0 && base != 1 && base != 2 && base != 3 && base != 4 && base != 8) {
        return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetMathMode", "unknown math mode %d", mode);
    }
    h->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

int cublasGetMathMode(cublasHandle_t h, int* mode) {
    if (!live_handle(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = h->math_mode;
    return CUBLAS_STATUS_SUCCESS;
}

int cublasSetPointerMode_v2(cublasHandle_t h, int mode) {
    if (!live_handle(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != 0 && mode != 1) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetPointerMode_v2", "mode %d", mode);
    h->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

int cublasGetPointerMode_v2(cublasHandle_t h, int* mode) {
    if (!live_handle(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = h->pointer_mode;
    return CUBLAS_STATUS_SUCCESS;
}

// The stand-in computes in place of cuBLAS 13.0.
int cublasGetVersion_v2(cublasHandle_t h, int* version) {
    if (!live_handle(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *version = 130000;
    return CUBLAS_STATUS_SUCCESS;
}

// The host needs no workspace, but which one is set decides what a capture records: with
// none, a gemm on a capturing stream allocates one (kCaptureWorkspaceBytes); with one,
// every gemm checks that it is still live memory of the handle's device.
int cublasSetWorkspace_v2(cublasHandle_t h, void* workspace, size_t bytes) {
    if (!live_handle(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
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

}  // extern "C"
