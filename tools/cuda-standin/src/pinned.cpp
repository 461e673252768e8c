// Pinned host memory (pinned.h): allocations from the host's heap, remembered by range,
// so copies can tell them from pageable memory.
#include "pinned.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "context.h"
#include "device_queue.h"
#include "errors.h"

namespace standin {
namespace {

struct Pinned {
    std::mutex lock;
    std::map<uintptr_t, size_t> live;  // base -> bytes
};

Pinned& pinned() {
    static Pinned* registry = new Pinned;  // outlives every static destructor
    return *registry;
}

// CU_MEMHOSTALLOC_PORTABLE | DEVICEMAP | WRITECOMBINED: accepted, and all the same here.
constexpr unsigned kKnownFlags = 0x7;

CUresult host_alloc(void** out, size_t bytes, unsigned flags, const char* call) {
    if (out == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, call, "NULL pointer");
    if ((flags & ~kKnownFlags) != 0) return fail(CUDA_ERROR_INVALID_VALUE, call, "unknown flags %#x", flags);
    if (bytes == 0) return fail(CUDA_ERROR_INVALID_VALUE, call, "a 0-byte allocation");
    {
        std::lock_guard<std::mutex> guard(state_lock());
        Context* ctx = nullptr;
        const CUresult ok = require_current(call, &ctx);
        if (ok != CUDA_SUCCESS) return ok;
    }
    void* p = std::calloc(1, bytes);
    if (p == nullptr) return fail(CUDA_ERROR_OUT_OF_MEMORY, call, "%zu bytes of host memory are not available", bytes);
    Pinned& r = pinned();
    std::lock_guard<std::mutex> guard(r.lock);
    r.live[reinterpret_cast<uintptr_t>(p)] = bytes;
    *out = p;
    return CUDA_SUCCESS;
}

}  // namespace

bool is_pinned(const void* host, size_t bytes) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(host);
    Pinned& r = pinned();
    std::lock_guard<std::mutex> guard(r.lock);
    auto it = r.live.upper_bound(p);
    if (it == r.live.begin()) return false;
    --it;
    return p + bytes <= it->first + it->second;
}

}  // namespace standin

using namespace standin;

extern "C" {

CUresult cuMemHostAlloc(void** out, size_t bytes, unsigned int flags) {
    return host_alloc(out, bytes, flags, "cuMemHostAlloc");
}

CUresult cuMemAllocHost_v2(void** out, size_t bytes) { return host_alloc(out, bytes, 0, "cuMemAllocHost_v2"); }

// Waits for the current context's queued work first: a copy queued from or to the
// buffer runs before the memory goes back to the heap.
CUresult cuMemFreeHost(void* p) {
    const char* call = "cuMemFreeHost";
    {
        std::lock_guard<std::mutex> guard(state_lock());
        Context* ctx = nullptr;
        CUresult ok = require_current(call, &ctx);
        if (ok == CUDA_SUCCESS) ok = synchronize_device_work(ctx, call);
        if (ok != CUDA_SUCCESS) return ok;
    }
    Pinned& r = pinned();
    {
        std::lock_guard<std::mutex> guard(r.lock);
        auto it = r.live.find(reinterpret_cast<uintptr_t>(p));
        if (it == r.live.end()) {
            return fail(CUDA_ERROR_INVALID_VALUE, call, "%p is not the start of pinned memory from cuMemHostAlloc", p);
        }
        r.live.erase(it);
    }
    std::free(p);
    return CUDA_SUCCESS;
}

}  // extern "C"
