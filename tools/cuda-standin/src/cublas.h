// cuBLAS's handle and status codes, shared by the handle calls (cublas.cpp) and the gemm
// entry points (cublas_gemm.cpp).
#pragma once

#include <cstddef>

#include "api.h"
#include "context.h"

namespace standin {

enum : int {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
};

struct BlasHandle {
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

// Reports a cuBLAS failure (cuBLAS has no per-call message channel, so it is printed)
// and returns `status`.
int blas_fail(int status, const char* call, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

// True when `h` was created and not destroyed.
bool live_handle(BlasHandle* h);

}  // namespace standin
