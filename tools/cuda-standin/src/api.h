// The CUDA driver API's types and codes, as the stand-in needs them.
//
// The stand-in is built without any CUDA header (the build machines have none), so the
// handful of types and numbers it implements are spelled out here. The numbers are the
// CUDA 13.0 ABI: cudarc's `driver::sys` (cuda-13000) and the driver's `cuda.h` agree on
// every one, and `scripts/cuda_standin.sh` cross-checks the error codes against cudarc.
#pragma once

#include <cstddef>
#include <cstdint>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

namespace standin {
struct Context;
struct Stream;
struct Event;
struct Module;
struct Function;
struct Graph;
struct GraphExec;
}  // namespace standin

typedef standin::Context* CUcontext;
typedef standin::Stream* CUstream;
typedef standin::Event* CUevent;
typedef standin::Module* CUmodule;
typedef standin::Function* CUfunction;
typedef standin::Graph* CUgraph;
typedef standin::GraphExec* CUgraphExec;

// CUresult values the stand-in returns.
enum : CUresult {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_ILLEGAL_STATE = 401,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
    CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908,
    CUDA_ERROR_UNKNOWN = 999,
};

// The legacy and per-thread default streams; both mean "the current context's default
// stream" here (the stand-in runs every stream's work in call order).
#define STANDIN_STREAM_LEGACY ((CUstream)0x1)
#define STANDIN_STREAM_PER_THREAD ((CUstream)0x2)
