// Pinned host memory for the stand-in (see pinned_host.h). On the host every byte is
// "pinned" already; what matters is which allocations the program asked to be pinned,
// so the registry keeps their ranges and host-to-device copies are classified by them.
#include "pinned_host.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

#include "context.h"
#include "errors.h"

namespace {

std::mutex& pinned_lock() {
    static std::mutex lock;
    return lock;
}

// Base address -> size of each live pinned allocation.
std::map<std::uintptr_t, std::size_t>& pinned_ranges() {
    static std::map<std::uintptr_t, std::size_t> ranges;
    return ranges;
}

std::atomic<unsigned long long> pinned_uploads{0};
std::atomic<unsigned long long> pageable_uploads{0};

bool inside_pinned(std::uintptr_t start, std::size_t bytes) {
    std::lock_guard<std::mutex> guard(pinned_lock());
    auto& ranges = pinned_ranges();
    auto it = ranges.upper_bound(start);
    if (it == ranges.begin()) return false;
    --it;
    return start - it->first + bytes <= it->second;
}

CUresult host_alloc(void** out, std::size_t bytes, unsigned int flags, const char* call) {
    if (out == nullptr) return standin::fail(CUDA_ERROR_INVALID_VALUE, call, "NULL result pointer");
    {
        std::lock_guard<std::mutex> guard(standin::state_lock());
        standin::Context* ctx = nullptr;
        const CUresult ok = standin::require_current(call, &ctx);
        if (ok != CUDA_SUCCESS) return ok;
    }
    // Portable, device-mapped and write-combined are the flags the driver knows.
    if ((flags & ~0x7u) != 0) return standin::fail(CUDA_ERROR_INVALID_VALUE, call, "unknown flags %#x", flags);
    // Page-aligned, as the driver's; a zero-byte request still gets a distinct address.
    const std::size_t rounded = ((bytes == 0 ? 1 : bytes) + 4095) / 4096 * 4096;
    void* block = std::aligned_alloc(4096, rounded);
    if (block == nullptr) {
        return standin::fail(CUDA_ERROR_OUT_OF_MEMORY, call, "cannot pin %zu bytes", bytes);
    }
    std::lock_guard<std::mutex> guard(pinned_lock());
    pinned_ranges()[reinterpret_cast<std::uintptr_t>(block)] = rounded;
    *out = block;
    return CUDA_SUCCESS;
}

}  // namespace

namespace standin {

void note_upload_source(const void* src, std::size_t bytes) {
    if (inside_pinned(reinterpret_cast<std::uintptr_t>(src), bytes)) {
        pinned_uploads.fetch_add(1, std::memory_order_relaxed);
    } else {
        pageable_uploads.fetch_add(1, std::memory_order_relaxed);
    }
}

UploadCounts upload_counts() {
    return {pinned_uploads.load(std::memory_order_relaxed), pageable_uploads.load(std::memory_order_relaxed)};
}

}  // namespace standin

extern "C" {

CUresult cuMemHostAlloc(void** out, size_t bytes, unsigned int flags) {
    return host_alloc(out, bytes, flags, "cuMemHostAlloc");
}

CUresult cuMemAllocHost_v2(void** out, size_t bytes) { return host_alloc(out, bytes, 0, "cuMemAllocHost_v2"); }

CUresult cuMemFreeHost(void* block) {
    std::lock_guard<std::mutex> guard(pinned_lock());
    auto it = pinned_ranges().find(reinterpret_cast<std::uintptr_t>(block));
    if (it == pinned_ranges().end()) {
        return standin::fail(CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost",
                             "%p is not an allocation of cuMemHostAlloc / cuMemAllocHost", block);
    }
    pinned_ranges().erase(it);
    std::free(block);
    return CUDA_SUCCESS;
}

}  // extern "C"
