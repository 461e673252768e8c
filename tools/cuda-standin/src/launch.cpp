// cuLaunchKernel: the driver's launch checks, then every thread of the grid on the host.
//
// Checked as the driver does: the function is live and belongs to the stream's context,
// which is current; grid at least 1 and at most (2^31 - 1, 65535, 65535); block at most
// (1024, 1024, 64) and 1024 threads, and within the kernel's .maxntid / .reqntid; at most
// 48 KiB of dynamic shared memory. Beyond the driver, every pointer argument must point
// into a live allocation of the launching device (freed memory, host memory and another
// device's memory are refused: a GPU would fault on them). A fault while the kernel runs
// (a guard page, freed memory) is CUDA_ERROR_ILLEGAL_ADDRESS; both faults and bad pointer
// arguments leave the context's sticky error set, as a GPU fault does. On a capturing
// stream the same checks run, and the launch is recorded instead (graphs.cpp). In the
// deferred mode (deferred.h) the checks run at the call and the grid runs when the
// queue reaches it; a fault then is the context's sticky error.
#include <cinttypes>
#include <cstring>
#include <string>

#include "context.h"
#include "deferred.h"
#include "errors.h"
#include "fault_trap.h"
#include "graphs.h"
#include "memory.h"
#include "module.h"

using namespace standin;

namespace {

constexpr unsigned kMaxGridX = 2147483647u;
constexpr unsigned kMaxGridYZ = 65535u;
constexpr unsigned kMaxBlockXY = 1024u;
constexpr unsigned kMaxBlockZ = 64u;
constexpr unsigned kMaxThreads = 1024u;
constexpr unsigned kMaxSharedBytes = 48u * 1024u;

CUresult check_geometry(const PtxEntry& entry, Dim3 grid, Dim3 block, unsigned shared) {
    const char* call = "cuLaunchKernel";
    const char* name = entry.name.c_str();
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > kMaxGridX || grid.y > kMaxGridYZ ||
        grid.z > kMaxGridYZ) {
        return fail(CUDA_ERROR_INVALID_VALUE, call, "%s: grid (%u, %u, %u) outside (1..2^31-1, 1..65535, 1..65535)",
                    name, grid.x, grid.y, grid.z);
    }
    const unsigned long long threads = 1ull * block.x * block.y * block.z;
    if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > kMaxBlockXY || block.y > kMaxBlockXY ||
        block.z > kMaxBlockZ || threads > kMaxThreads) {
        return fail(CUDA_ERROR_INVALID_VALUE, call,
                    "%s: block (%u, %u, %u) = %llu threads; at most (1024, 1024, 64) and 1024 threads per block",
                    name, block.x, block.y, block.z, threads);
    }
    if (entry.max_threads != 0 && threads > entry.max_threads) {
        return fail(CUDA_ERROR_INVALID_VALUE, call, "%s: %llu threads per block, its .maxntid allows %u", name,
                    threads, entry.max_threads);
    }
    const unsigned* req = entry.req_ntid;
    if (req[0] != 0 && (block.x != req[0] || block.y != req[1] || block.z != req[2])) {
        return fail(CUDA_ERROR_INVALID_VALUE, call, "%s: block (%u, %u, %u), its .reqntid is (%u, %u, %u)", name,
                    block.x, block.y, block.z, req[0], req[1], req[2]);
    }
    if (shared > kMaxSharedBytes) {
        return fail(CUDA_ERROR_INVALID_VALUE, call, "%s: %u bytes of dynamic shared memory, at most 49152", name, shared);
    }
    return CUDA_SUCCESS;
}

// Every pointer argument is NULL or points into a live allocation of `device`. On
// failure, `reason` says which argument and why.
bool pointers_valid(const HostKernel& host, void** params, int device, std::string* reason) {
    for (size_t i = 0; i < host.params.size(); ++i) {
        if (!host.params[i].pointer) continue;
        uintptr_t p = 0;
        std::memcpy(&p, params[i], sizeof p);
        if (p == 0) continue;
        Allocation a;
        char text[400];
        if (!find_allocation(p, &a)) {
            std::snprintf(text, sizeof text, "%s: argument %zu is %s", host.name, i, describe_address(p).c_str());
            *reason = text;
            return false;
        }
        if (a.device != device) {
            std::snprintf(text, sizeof text,
                          "%s: argument %zu points into the memory of device %d, but the kernel runs on device %d "
                          "(no peer access)",
                          host.name, i, a.device, device);
            *reason = text;
            return false;
        }
    }
    return true;
}

const char* signal_name(int sig) {
    switch (sig) {
        case 11: return "SIGSEGV";
        case 7: return "SIGBUS";
        case 8: return "SIGFPE";
        default: return "a signal";
    }
}

}  // namespace

extern "C" CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                                   CUstream stream, void** params, void** extra) {
    const char* call = "cuLaunchKernel";
    Context* ctx = nullptr;
    Capture* capture = nullptr;
    {
        std::lock_guard<std::mutex> guard(state_lock());
        const CUresult ok = resolve_stream(stream, call, true, &ctx);
        if (ok != CUDA_SUCCESS) return ok;
        capture = capture_of(stream);
    }
    if (extra != nullptr) return not_supported(call, "the `extra` argument (pass kernelParams)");
    return launch_checked(f, ctx, stream, capture, Dim3{gx, gy, gz}, Dim3{bx, by, bz}, shared, params);
}

namespace standin {

// The checks of a launch, then every thread of the grid (or, capturing, a recording).
// cuGraphLaunch comes here for each recorded kernel, so a replay is checked as a launch.
CUresult launch_checked(CUfunction f, Context* ctx, CUstream stream, Capture* capture, Dim3 grid, Dim3 block, unsigned shared,
                        void** params) {
    const char* call = "cuLaunchKernel";
    const HostKernel* host = nullptr;
    const PtxEntry* entry = nullptr;
    {
        std::lock_guard<std::mutex> guard(state_lock());
        const CUresult ok = live_function(f, call);
        if (ok != CUDA_SUCCESS) return ok;
        if (f->module->ctx != ctx) {
            return fail(CUDA_ERROR_INVALID_HANDLE, call, "%s was loaded on device %d, launched on device %d",
                        f->host->name, f->module->ctx->device, ctx->device);
        }
        host = f->host;
        entry = f->entry;
    }
    CUresult ok = check_geometry(*entry, grid, block, shared);
    if (ok != CUDA_SUCCESS) return ok;
    if (params == nullptr && !host->params.empty()) {
        return fail(CUDA_ERROR_INVALID_VALUE, call, "%s takes %zu parameters, kernelParams is NULL", host->name,
                    host->params.size());
    }
    std::string reason;
    if (!pointers_valid(*host, params, ctx->device, &reason)) {
        std::lock_guard<std::mutex> guard(state_lock());
        poison(ctx, CUDA_ERROR_ILLEGAL_ADDRESS, reason);
        return fail(CUDA_ERROR_ILLEGAL_ADDRESS, call, "%s", reason.c_str());
    }
    if (capture != nullptr) {
        // Recorded with a copy of each argument's bytes, as the driver copies them.
        GraphNode node;
        node.kind = GraphNode::Kernel;
        node.function = f;
        node.grid = grid;
        node.block = block;
        node.shared = shared;
        for (size_t i = 0; i < host->params.size(); ++i) {
            const unsigned char* bytes = static_cast<const unsigned char*>(params[i]);
            node.params.emplace_back(bytes, bytes + host->params[i].size);
        }
        std::lock_guard<std::mutex> guard(state_lock());
        if (capture->invalidated) return refuse_in_capture(capture, call, "a launch after the capture failed");
        capture->graph->nodes.push_back(std::move(node));
        return CUDA_SUCCESS;
    }
    if (defer_stream_work()) {
        // Queued with a copy of each argument's bytes, as the driver copies them.
        std::vector<std::vector<unsigned char>> args;
        for (size_t i = 0; i < host->params.size(); ++i) {
            const unsigned char* bytes = static_cast<const unsigned char*>(params[i]);
            args.emplace_back(bytes, bytes + host->params[i].size);
        }
        defer(ctx, stream, host->name, [host, args = std::move(args), grid, block]() mutable {
            std::vector<void*> pointers;
            for (auto& bytes : args) pointers.push_back(bytes.data());
            host->run(pointers.data(), grid, block);
        });
        return CUDA_SUCCESS;
    }
    const Fault fault = trapped([&] { host->run(params, grid, block); });
    if (fault.signal != 0) {
        const CUresult code = fault.signal == 8 ? CUDA_ERROR_LAUNCH_FAILED : CUDA_ERROR_ILLEGAL_ADDRESS;
        char text[600];
        if (fault.signal == 8) {
            std::snprintf(text, sizeof text,
                          "%s (grid %u, block %u) divided an integer by zero (SIGFPE); a GPU returns an "
                          "unspecified value instead",
                          host->name, grid.x, block.x);
        } else {
            std::snprintf(text, sizeof text, "%s (grid %u, block %u) stopped with %s: it touched %s", host->name,
                          grid.x, block.x, signal_name(fault.signal), describe_address(fault.address).c_str());
        }
        std::lock_guard<std::mutex> guard(state_lock());
        poison(ctx, code, text);
        return fail(code, call, "%s", text);
    }
    return CUDA_SUCCESS;
}

}  // namespace standin
