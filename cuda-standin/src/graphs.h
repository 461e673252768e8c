// Stream capture and CUDA graphs: what is recorded while a stream captures, and the
// checks the other calls make against an active capture (graphs.cpp).
#pragma once

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "api.h"
#include "context.h"
#include "host_kernel.h"

namespace standin {

// One piece of recorded stream work, replayed by cuGraphLaunch in recording order.
struct GraphNode {
    enum Kind { Kernel, Memset, Copy, Host } kind = Kernel;
    // Kernel: the function, its geometry and a copy of every kernelParams value.
    CUfunction function = nullptr;
    Dim3 grid{1, 1, 1};
    Dim3 block{1, 1, 1};
    unsigned shared = 0;
    std::vector<std::vector<unsigned char>> params;
    // Memset: `count` elements of `width` bytes of `value` at `dst`. Copy: `count` bytes
    // from `src` to `dst` (device to device).
    CUdeviceptr dst = 0;
    CUdeviceptr src = 0;
    unsigned value = 0;
    size_t width = 0;
    size_t count = 0;
    // Host: work the stand-in does on the host for a library call on the stream (a
    // cuBLAS gemm), with its arguments bound; a GPU would record the library's kernels.
    std::function<void()> host;
};

struct Graph {
    Context* ctx;
    unsigned generation;
    std::vector<GraphNode> nodes;
};

struct GraphExec {
    Context* ctx;
    unsigned generation;
    std::vector<GraphNode> nodes;
};

// A stream's capture in progress (cuStreamBeginCapture's mode, CUstreamCaptureMode).
struct Capture {
    Graph* graph;
    int mode;  // 0 global, 1 thread-local, 2 relaxed
    std::thread::id thread;
    bool invalidated = false;
    std::string reason;
};

// The capture of `stream`, or nullptr (also for the default streams). state_lock held.
Capture* capture_of(CUstream stream);

// Refuses `call` on a capturing stream: the capture is invalidated (cuStreamEndCapture
// then fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, as with the driver) and the
// call returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED. state_lock held.
CUresult refuse_in_capture(Capture* capture, const char* call, const char* what);

// For a call that is not stream-ordered (a synchronous copy, an allocation, a context
// synchronisation) on `ctx`: while a stream of `ctx` captures in global mode, or in
// thread-local mode begun by this thread, the call is "unsafe" and refused the same way.
// CUDA_SUCCESS otherwise. state_lock held.
CUresult check_unsafe_during_capture(Context* ctx, const char* call);

// Records a memset / device-to-device copy into `capture`. state_lock held.
CUresult record_memset(Capture* capture, CUdeviceptr dst, unsigned value, size_t width, size_t count,
                       const char* call);
CUresult record_copy(Capture* capture, CUdeviceptr dst, CUdeviceptr src, size_t bytes, const char* call);
CUresult record_host(Capture* capture, std::function<void()> work, const char* call);

// A kernel launch after the driver's checks (launch.cpp): runs it, or with `capture`
// non-null records it. `ctx` is the stream's context.
CUresult launch_checked(CUfunction f, Context* ctx, Capture* capture, Dim3 grid, Dim3 block, unsigned shared,
                        void** params);

}  // namespace standin
