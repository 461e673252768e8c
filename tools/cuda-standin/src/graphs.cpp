// Stream capture and CUDA graphs, by recording and replaying.
//
// cuStreamBeginCapture turns a stream (never a default stream: the driver refuses the
// legacy NULL stream) into a recorder: kernel launches, memsets and device-to-device
// copies issued to it are checked as if they ran, then kept as nodes of a graph, with a
// copy of each kernel's argument bytes. Work that cannot be part of a graph on a GPU
// (copies to or from host memory, freeing memory the capture did not allocate, waiting
// for the stream)
// is refused with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture, so
// cuStreamEndCapture fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, as with the
// driver. cuBLAS calls on a capturing stream are recorded as host nodes (cublas_gemm.cpp).
// cuGraphInstantiateWithFlags copies the nodes into an executable graph;
// cuGraphLaunch replays them in recording order on the host, each kernel through the
// same checks as cuLaunchKernel (so a graph whose buffers were freed faults, as it
// would on a GPU). The call counts (DITTO_CUDA_STANDIN_STATS) show one cuGraphLaunch
// per replay and no cuLaunchKernel: recorded kernels are not launched through it.
#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <set>

#include "deferred.h"
#include "device_queue.h"
#include "errors.h"
#include "graphs.h"
#include "memory.h"
#include "module.h"

namespace standin {
namespace {

std::set<Graph*>& graphs() {
    static std::set<Graph*> all;
    return all;
}

std::set<GraphExec*>& execs() {
    static std::set<GraphExec*> all;
    return all;
}

// The memory of every live graph's allocation nodes (GraphMemory).
std::set<CUdeviceptr>& graph_allocations() {
    static std::set<CUdeviceptr> all;
    return all;
}

// Every capture in progress, to find the ones an unsafe call would disturb.
std::set<Stream*>& capturing_streams() {
    static std::set<Stream*> all;
    return all;
}

bool is_default_stream(CUstream s) {
    return s == nullptr || s == STANDIN_STREAM_LEGACY || s == STANDIN_STREAM_PER_THREAD;
}

// Replays one memset, copy or host node (kernels go through launch_checked).
CUresult replay_memory_node(GraphExec* exec, const GraphNode& node) {
    const char* call = "cuGraphLaunch";
    if (node.kind == GraphNode::Alloc) {
        exec->unfreed.insert(node.dst);
        return CUDA_SUCCESS;
    }
    if (node.kind == GraphNode::Free) {
        exec->unfreed.erase(node.dst);
        return CUDA_SUCCESS;
    }
    if (node.kind == GraphNode::Host) {
        node.host();
        return CUDA_SUCCESS;
    }
    if (node.kind == GraphNode::Memset) {
        CUresult ok = check_device_range(node.dst, node.width * node.count, call, "memset destination", nullptr);
        if (ok != CUDA_SUCCESS) return ok;
        unsigned char* p = reinterpret_cast<unsigned char*>(node.dst);
        for (size_t i = 0; i < node.count; ++i) std::memcpy(p + i * node.width, &node.value, node.width);
        return CUDA_SUCCESS;
    }
    CUresult ok = check_device_range(node.dst, node.count, call, "copy destination", nullptr);
    if (ok == CUDA_SUCCESS) ok = check_device_range(node.src, node.count, call, "copy source", nullptr);
    if (ok != CUDA_SUCCESS) return ok;
    std::memmove(reinterpret_cast<void*>(node.dst), reinterpret_cast<const void*>(node.src), node.count);
    return CUDA_SUCCESS;
}

CUresult live_exec(CUgraphExec exec, const char* call) {
    if (execs().count(exec) == 0) return fail(CUDA_ERROR_INVALID_HANDLE, call, "not a live executable graph");
    if (exec->generation != exec->ctx->generation) {
        return fail(CUDA_ERROR_INVALID_HANDLE, call, "the context of the graph was destroyed");
    }
    return require_live(exec->ctx, call);
}

}  // namespace

GraphMemory::~GraphMemory() {
    for (CUdeviceptr block : blocks) {
        graph_allocations().erase(block);
        Allocation live;
        // Gone already if the context was destroyed with its memory.
        if (find_allocation(block, &live) && live.base == block) device_free(block, "cuGraphDestroy", nullptr);
    }
}

bool is_graph_allocation(CUdeviceptr ptr) { return graph_allocations().count(ptr) != 0; }

CUresult record_alloc(Capture* capture, int device, size_t bytes, const char* call, CUdeviceptr* out) {
    if (capture->invalidated) return refuse_in_capture(capture, call, "an allocation after the capture failed");
    CUresult ok = device_alloc(device, bytes, call, out);
    if (ok != CUDA_SUCCESS) return ok;
    capture->graph->memory->blocks.push_back(*out);
    graph_allocations().insert(*out);
    GraphNode node;
    node.kind = GraphNode::Alloc;
    node.dst = *out;
    node.count = bytes;
    capture->graph->nodes.push_back(node);
    return CUDA_SUCCESS;
}

CUresult record_free(Capture* capture, CUdeviceptr ptr, const char* call) {
    const std::vector<CUdeviceptr>& own = capture->graph->memory->blocks;
    if (std::find(own.begin(), own.end(), ptr) == own.end()) {
        return refuse_in_capture(capture, call, "freeing memory this capture did not allocate");
    }
    if (capture->invalidated) return refuse_in_capture(capture, call, "a free after the capture failed");
    GraphNode node;
    node.kind = GraphNode::Free;
    node.dst = ptr;
    capture->graph->nodes.push_back(node);
    return CUDA_SUCCESS;
}

Capture* capture_of(CUstream stream) {
    if (is_default_stream(stream)) return nullptr;
    return stream->capture;
}

CUresult refuse_in_capture(Capture* capture, const char* call, const char* what) {
    if (!capture->invalidated) {
        capture->invalidated = true;
        capture->reason = std::string(call) + ": " + what;
    }
    return fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, call, "%s while the stream is being captured", what);
}

CUresult check_unsafe_during_capture(Context* ctx, const char* call) {
    for (Stream* s : capturing_streams()) {
        Capture* c = s->capture;
        if (s->ctx != ctx || c->mode == 2) continue;
        if (c->mode == 1 && c->thread != std::this_thread::get_id()) continue;
        return refuse_in_capture(c, call, "a call that is not stream-ordered (unsafe in this capture mode)");
    }
    return CUDA_SUCCESS;
}

CUresult record_memset(Capture* capture, CUdeviceptr dst, unsigned value, size_t width, size_t count,
                       const char* call) {
    if (capture->invalidated) return refuse_in_capture(capture, call, "a memset after the capture failed");
    GraphNode node;
    node.kind = GraphNode::Memset;
    node.dst = dst;
    node.value = value;
    node.width = width;
    node.count = count;
    capture->graph->nodes.push_back(node);
    return CUDA_SUCCESS;
}

CUresult record_copy(Capture* capture, CUdeviceptr dst, CUdeviceptr src, size_t bytes, const char* call) {
    if (capture->invalidated) return refuse_in_capture(capture, call, "a copy after the capture failed");
    GraphNode node;
    node.kind = GraphNode::Copy;
    node.dst = dst;
    node.src = src;
    node.count = bytes;
    capture->graph->nodes.push_back(node);
    return CUDA_SUCCESS;
}

CUresult record_host(Capture* capture, std::function<void()> work, const char* call) {
    if (capture->invalidated) return refuse_in_capture(capture, call, "a library call after the capture failed");
    GraphNode node;
    node.kind = GraphNode::Host;
    node.host = std::move(work);
    capture->graph->nodes.push_back(std::move(node));
    return CUDA_SUCCESS;
}

}  // namespace standin

using namespace standin;

extern "C" {

CUresult cuStreamBeginCapture_v2(CUstream stream, int mode) {
    const char* call = "cuStreamBeginCapture_v2";
    if (mode < 0 || mode > 2) return fail(CUDA_ERROR_INVALID_VALUE, call, "unknown capture mode %d", mode);
    std::lock_guard<std::mutex> guard(state_lock());
    Context* ctx = nullptr;
    const CUresult ok = resolve_stream(stream, call, false, &ctx);
    if (ok != CUDA_SUCCESS) return ok;
    if (is_default_stream(stream)) {
        return fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, call,
                    "a default stream cannot be captured (capture a stream made with cuStreamCreate)");
    }
    if (stream->capture != nullptr) return fail(CUDA_ERROR_ILLEGAL_STATE, call, "the stream is already capturing");
    Graph* graph = new Graph{ctx, ctx->generation, {}};
    graphs().insert(graph);
    static unsigned long long captures_begun = 0;
    stream->capture = new Capture{graph, mode, std::this_thread::get_id(), false, {}, ++captures_begun};
    capturing_streams().insert(stream);
    return CUDA_SUCCESS;
}

CUresult cuStreamBeginCapture(CUstream stream, int mode) { return cuStreamBeginCapture_v2(stream, mode); }

CUresult cuStreamEndCapture(CUstream stream, CUgraph* out) {
    const char* call = "cuStreamEndCapture";
    if (out == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, call, "NULL pointer");
    std::lock_guard<std::mutex> guard(state_lock());
    Context* ctx = nullptr;
    const CUresult ok = resolve_stream(stream, call, false, &ctx);
    if (ok != CUDA_SUCCESS) return ok;
    Capture* capture = capture_of(stream);
    if (capture == nullptr) return fail(CUDA_ERROR_ILLEGAL_STATE, call, "the stream is not capturing");
    if (capture->mode != 2 && capture->thread != std::this_thread::get_id()) {
        return fail(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, call,
                    "the capture was begun by another thread (global and thread-local modes)");
    }
    stream->capture = nullptr;
    capturing_streams().erase(stream);
    *out = nullptr;
    if (capture->invalidated) {
        graphs().erase(capture->graph);
        delete capture->graph;
        const std::string reason = capture->reason;
        delete capture;
        return fail(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, call, "the capture was invalidated by %s", reason.c_str());
    }
    *out = capture->graph;
    delete capture;
    return CUDA_SUCCESS;
}

CUresult cuStreamIsCapturing(CUstream stream, int* status) {
    const char* call = "cuStreamIsCapturing";
    if (status == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, call, "NULL pointer");
    std::lock_guard<std::mutex> guard(state_lock());
    Context* ctx = nullptr;
    const CUresult ok = resolve_stream(stream, call, false, &ctx);
    if (ok != CUDA_SUCCESS) return ok;
    const Capture* capture = capture_of(stream);
    *status = capture == nullptr ? 0 : capture->invalidated ? 2 : 1;
    return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph graph, unsigned long long flags) {
    const char* call = "cuGraphInstantiateWithFlags";
    if (out == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, call, "NULL pointer");
    if ((flags & ~kAutoFreeOnLaunch) != 0) {
        return not_supported(call, "instantiate flags other than 0 and CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH");
    }
    std::lock_guard<std::mutex> guard(state_lock());
    if (graphs().count(graph) == 0) return fail(CUDA_ERROR_INVALID_HANDLE, call, "not a live graph");
    if (graph->generation != graph->ctx->generation) {
        return fail(CUDA_ERROR_INVALID_HANDLE, call, "the context of the graph was destroyed");
    }
    GraphExec* exec = new GraphExec{graph->ctx, graph->generation, graph->nodes, flags, graph->memory, {}};
    execs().insert(exec);
    *out = exec;
    return CUDA_SUCCESS;
}

CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
    const char* call = "cuGraphLaunch";
    Context* ctx = nullptr;
    {
        std::lock_guard<std::mutex> guard(state_lock());
        CUresult ok = live_exec(exec, call);
        if (ok == CUDA_SUCCESS) ok = resolve_stream(stream, call, true, &ctx);
        if (ok != CUDA_SUCCESS) return ok;
        if (Capture* capture = capture_of(stream)) {
            return refuse_in_capture(capture, call, "launching a graph (child graphs are not supported)");
        }
        if (ctx != exec->ctx) {
            return fail(CUDA_ERROR_INVALID_HANDLE, call, "a graph of device %d launched on a stream of device %d",
                        exec->ctx->device, ctx->device);
        }
        // The driver's rule for graphs with allocation nodes: a relaunch needs what the
        // last launch allocated freed first, unless the graph frees it itself.
        if (!exec->unfreed.empty() && (exec->flags & kAutoFreeOnLaunch) == 0) {
            return fail(CUDA_ERROR_INVALID_VALUE, call,
                        "relaunch of a graph whose allocation at %#" PRIx64 " (made during capture by "
                        "cuMemAllocAsync or a library such as cuBLAS) from the previous launch is still "
                        "allocated; free it in the graph, or instantiate with "
                        "CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH",
                        (uint64_t)*exec->unfreed.begin());
        }
        exec->unfreed.clear();
    }
    if (defer_stream_work()) {
        // The allocation bookkeeping is the launch's; the nodes run when the queue
        // reaches them (deferred.h), each checked then as a launch is.
        for (const GraphNode& node : exec->nodes) {
            if (node.kind == GraphNode::Alloc) exec->unfreed.insert(node.dst);
            if (node.kind == GraphNode::Free) exec->unfreed.erase(node.dst);
        }
        defer(ctx, stream, call, [exec, ctx, nodes = exec->nodes] {
            for (const GraphNode& node : nodes) {
                CUresult ok = CUDA_SUCCESS;
                if (node.kind == GraphNode::Kernel) {
                    std::vector<void*> params;
                    for (const auto& bytes : node.params) params.push_back(const_cast<unsigned char*>(bytes.data()));
                    ok = launch_checked(node.function, ctx, nullptr, nullptr, node.grid, node.block, node.shared, params.data());
                } else if (node.kind != GraphNode::Alloc && node.kind != GraphNode::Free) {
                    ok = replay_memory_node(exec, node);
                }
                if (ok != CUDA_SUCCESS) {
                    std::lock_guard<std::mutex> guard(state_lock());
                    poison(ctx, ok, "a node of a deferred cuGraphLaunch failed (see the message above)");
                    return;
                }
            }
        });
        return CUDA_SUCCESS;
    }
    for (const GraphNode& node : exec->nodes) {
        CUresult ok = CUDA_SUCCESS;
        if (node.kind == GraphNode::Kernel) {
            std::vector<void*> params;
            for (const auto& bytes : node.params) params.push_back(const_cast<unsigned char*>(bytes.data()));
            ok = launch_checked(node.function, ctx, stream, nullptr, node.grid, node.block, node.shared, params.data());
        } else {
            ok = replay_memory_node(exec, node);
        }
        if (ok != CUDA_SUCCESS) return ok;
    }
    return CUDA_SUCCESS;
}

CUresult cuGraphUpload(CUgraphExec exec, CUstream stream) {
    std::lock_guard<std::mutex> guard(state_lock());
    CUresult ok = live_exec(exec, "cuGraphUpload");
    Context* ctx = nullptr;
    if (ok == CUDA_SUCCESS) ok = resolve_stream(stream, "cuGraphUpload", true, &ctx);
    return ok;
}

CUresult cuGraphExecDestroy(CUgraphExec exec) {
    std::lock_guard<std::mutex> guard(state_lock());
    if (execs().count(exec) == 0) return fail(CUDA_ERROR_INVALID_HANDLE, "cuGraphExecDestroy", "not a live executable graph");
    drain_device_work(exec->ctx);  // a queued launch (deferred.h) finishes first
    if (execs().count(exec) == 0) return fail(CUDA_ERROR_INVALID_HANDLE, "cuGraphExecDestroy", "not a live executable graph");
    execs().erase(exec);
    delete exec;
    return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph graph) {
    std::lock_guard<std::mutex> guard(state_lock());
    if (graphs().count(graph) == 0) return fail(CUDA_ERROR_INVALID_HANDLE, "cuGraphDestroy", "not a live graph");
    drain_device_work(graph->ctx);  // its memory outlives queued launches (deferred.h)
    if (graphs().count(graph) == 0) return fail(CUDA_ERROR_INVALID_HANDLE, "cuGraphDestroy", "not a live graph");
    graphs().erase(graph);
    delete graph;
    return CUDA_SUCCESS;
}

}  // extern "C"
