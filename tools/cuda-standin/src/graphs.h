// Stream capture and CUDA graphs: what is recorded while a stream captures, and the
// checks the other calls make against an active capture (graphs.cpp).
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "api.h"
#include "context.h"
#include "host_kernel.h"

namespace standin {

// One piece of recorded stream work, replayed by cuGraphLaunch in recording order.
struct GraphNode {
    enum Kind { Kernel, Memset, Copy, Host, Alloc, Free } kind = Kernel;
    // Kernel: the function, its geometry and a copy of every kernelParams value.
    CUfunction function = nullptr;
    Dim3 grid{1, 1, 1};
    Dim3 block{1, 1, 1};
    unsigned shared = 0;
    std::vector<std::vector<unsigned char>> params;
    // Memset: `count` elements of `width` bytes of `value` at `dst`. Copy: `count` bytes
    // from `src` to `dst` (device to device). Alloc / Free: the graph allocation at `dst`
    // (`count` bytes) becomes allocated / freed.
    CUdeviceptr dst = 0;
    CUdeviceptr src = 0;
    unsigned value = 0;
    size_t width = 0;
    size_t count = 0;
    // Host: work the stand-in does on the host for a library call on the stream (a
    // cuBLAS gemm), with its arguments bound; a GPU would record the library's kernels.
    std::function<void()> host;
};

// The memory of a graph's allocation nodes (cuMemAllocAsync during capture, or a
// cuBLAS workspace cuBLAS allocated so): reserved at capture, as a GPU reserves the
// addresses, and given back when the graph and every executable graph made from it are
// gone.
struct GraphMemory {
    std::vector<CUdeviceptr> blocks;
    ~GraphMemory();
};

struct Graph {
    Context* ctx;
    unsigned generation;
    std::vector<GraphNode> nodes;
    std::shared_ptr<GraphMemory> memory = std::make_shared<GraphMemory>();
};

// CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH: a launch first frees what the
// previous launch allocated and left unfreed.
constexpr unsigned long long kAutoFreeOnLaunch = 1;

struct GraphExec {
    Context* ctx;
    unsigned generation;
    std::vector<GraphNode> nodes;
    unsigned long long flags = 0;
    std::shared_ptr<GraphMemory> memory;
    // Graph allocations a launch made that nothing freed yet: the driver refuses to
    // launch the graph again while one is (unless kAutoFreeOnLaunch).
    std::set<CUdeviceptr> unfreed;
};

// A stream's capture in progress (cuStreamBeginCapture's mode, CUstreamCaptureMode).
struct Capture {
    Graph* graph;
    int mode;  // 0 global, 1 thread-local, 2 relaxed
    std::thread::id thread;
    bool invalidated = false;
    std::string reason;
    unsigned long long serial = 0;  // distinct for every capture of the process
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

// Records an allocation node: `bytes` of new memory on `device`, owned by the graph
// (cuMemAllocAsync on a capturing stream, or cuBLAS allocating its workspace during a
// capture). state_lock held.
CUresult record_alloc(Capture* capture, int device, size_t bytes, const char* call, CUdeviceptr* out);

// Records a free node for `ptr`, which must be an allocation node of the same capture
// (cuMemFreeAsync on a capturing stream); refuses (invalidating the capture) otherwise.
// state_lock held.
CUresult record_free(Capture* capture, CUdeviceptr ptr, const char* call);

// True when `ptr` is the memory of a graph's allocation node. state_lock held.
bool is_graph_allocation(CUdeviceptr ptr);

// A kernel launch after the driver's checks (launch.cpp): runs it, or with `capture`
// non-null records it. `ctx` is the stream's context.
CUresult launch_checked(CUfunction f, Context* ctx, CUstream stream, Capture* capture, Dim3 grid, Dim3 block, unsigned shared,
                        void** params);

}  // namespace standin
