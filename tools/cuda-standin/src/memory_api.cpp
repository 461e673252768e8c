// The driver's allocation, memset and copy calls, checked against the memory registry.
//
// "Async" calls finish before they return in the eager mode, which is one of the orders a
// GPU may run them in; in the deferred mode (deferred.h) they are checked, then queued. Device ranges must lie inside one live allocation;
// host ranges must not be device memory, and a host address that faults while copying
// is an error, not a crash. On a capturing stream memsets, device-to-device copies and
// stream-ordered allocations and frees are recorded; other calls are refused (graphs.cpp). With unified addressing a copy may name any device's memory
// (the driver infers the device from the pointer); kernels may not (see launch.cpp).
#include <cinttypes>
#include <cstring>
#include <memory>
#include <vector>

#include "context.h"
#include "deferred.h"
#include "device_queue.h"
#include "errors.h"
#include "fault_trap.h"
#include "graphs.h"
#include "memory.h"
#include "pinned.h"
#include "upload_sources.h"

using namespace standin;

namespace {

// The current context (live) for a synchronous call, or the stream's for an async one.
// On a capturing stream, `recordable` work (memsets, device-to-device copies) is left to
// the caller to record (`*capture` set); anything else is refused (graphs.h). A
// synchronous call is refused while a capture it would disturb is active. A synchronous
// copy or memset is issued to the legacy stream, so it waits for that stream and the
// blocking streams, not for non-blocking ones (`whole_device`: allocation calls, which
// the driver makes wait for the whole device).
CUresult context_for(CUstream stream, bool async, const char* call, Context** ctx, Capture** capture = nullptr,
                     bool whole_device = false) {
    std::lock_guard<std::mutex> guard(state_lock());
    if (!async) {
        CUresult ok = require_current(call, ctx);
        if (ok == CUDA_SUCCESS) {
            ok = whole_device ? synchronize_device_work(*ctx, call)
                              : synchronize_stream_work(*ctx, STANDIN_STREAM_LEGACY, call);
        }
        return ok == CUDA_SUCCESS ? check_unsafe_during_capture(*ctx, call) : ok;
    }
    const CUresult ok = resolve_stream(stream, call, true, ctx);
    if (ok != CUDA_SUCCESS) return ok;
    Capture* active = capture_of(stream);
    if (active == nullptr) return CUDA_SUCCESS;
    if (capture == nullptr) return refuse_in_capture(active, call, "host memory or allocation work");
    *capture = active;
    return CUDA_SUCCESS;
}

CUresult check_host(const void* host, size_t bytes, const char* call, const char* what) {
    if (bytes > 0 && host == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, call, "%s is NULL", what);
    if (bytes > 0 && overlaps_device_memory(host, bytes)) {
        return fail(CUDA_ERROR_INVALID_VALUE, call, "%s %p is device memory, not host memory", what, host);
    }
    return CUDA_SUCCESS;
}

// memcpy under the fault trap: an unreadable or unwritable host range is an error.
CUresult copy_bytes(void* dst, const void* src, size_t bytes, const char* call) {
    const Fault fault = trapped([&] { std::memcpy(dst, src, bytes); });
    if (fault.signal != 0) {
        return fail(CUDA_ERROR_INVALID_VALUE, call, "the host buffer faulted at %#" PRIxPTR " (signal %d)",
                    fault.address, fault.signal);
    }
    return CUDA_SUCCESS;
}

// On a capturing stream, cuMemAllocAsync records an allocation node and cuMemFreeAsync
// of its memory a free node (graphs.h).
CUresult alloc(CUdeviceptr* out, size_t bytes, CUstream stream, bool async, const char* call) {
    if (out == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, call, "NULL pointer");
    Context* ctx = nullptr;
    Capture* capture = nullptr;
    const CUresult ok = context_for(stream, async, call, &ctx, async ? &capture : nullptr, true);
    if (ok != CUDA_SUCCESS) return ok;
    if (capture != nullptr) {
        std::lock_guard<std::mutex> guard(state_lock());
        return record_alloc(capture, ctx->device, bytes, call, out);
    }
    const CUresult ok2 = device_alloc(ctx->device, bytes, call, out);
    if (ok2 != CUDA_ERROR_OUT_OF_MEMORY || !async || !defer_stream_work()) return ok2;
    // Deferred: frees queued on the streams have not run yet. The driver's pool reuses
    // memory freed earlier in stream order (it adds the dependency), so the allocation
    // waits for every stream's queue of the context and tries again.
    {
        std::lock_guard<std::mutex> guard(state_lock());
        drain_device_work(ctx);
    }
    return device_alloc(ctx->device, bytes, call, out);
}

CUresult free_ptr(CUdeviceptr ptr, CUstream stream, bool async, const char* call) {
    Context* ctx = nullptr;
    Capture* capture = nullptr;
    const CUresult ok = context_for(stream, async, call, &ctx, async ? &capture : nullptr, true);
    if (ok != CUDA_SUCCESS) return ok;
    std::lock_guard<std::mutex> guard(state_lock());
    if (capture != nullptr) return record_free(capture, ptr, call);
    if (is_graph_allocation(ptr)) {
        return not_supported(call, "freeing a graph's allocation outside the graph (the stand-in does not model it)");
    }
    Allocation live;
    if (async && defer_stream_work() && find_allocation(ptr, &live) && live.base == ptr) {
        // Freed when the queue reaches it; from then on its pages fault (memory.h).
        defer(ctx, stream, call, [ptr, call] { device_free(ptr, call, nullptr); });
        return CUDA_SUCCESS;
    }
    return device_free(ptr, call, nullptr);
}

// Fills `count` elements of `width` bytes with `value`'s low bytes.
CUresult memset_n(CUdeviceptr dst, unsigned value, size_t width, size_t count, CUstream stream,
                  bool async, const char* call) {
    Context* ctx = nullptr;
    Capture* capture = nullptr;
    CUresult ok;
    if (async) {
        NoDrain queue;  // an async memset queues behind device work instead of waiting for it
        ok = context_for(stream, async, call, &ctx, &capture);
    } else {
        ok = context_for(stream, async, call, &ctx, &capture);
    }
    if (ok != CUDA_SUCCESS) return ok;
    if (count == 0) return CUDA_SUCCESS;
    if (dst % width != 0) {
        return fail(CUDA_ERROR_INVALID_VALUE, call, "destination %#" PRIx64 " is not %zu-byte aligned",
                    (uint64_t)dst, width);
    }
    ok = check_device_range(dst, count * width, call, "destination", nullptr);
    if (ok != CUDA_SUCCESS) return ok;
    if (capture != nullptr) {
        std::lock_guard<std::mutex> guard(state_lock());
        return record_memset(capture, dst, value, width, count, call);
    }
    auto fill = [dst, value, width, count] {
        unsigned char* p = reinterpret_cast<unsigned char*>(dst);
        for (size_t i = 0; i < count; ++i) std::memcpy(p + i * width, &value, width);
    };
    if (async && defer_stream_work()) {
        defer(ctx, stream, call, fill);
        return CUDA_SUCCESS;
    }
    if (async && !stream_idle(ctx, stream)) {
        // Behind a queued collective, as on a GPU: the host does not wait (a zeroed
        // output buffer before a collective must not block the call that issues it).
        enqueue_device_work(ctx, stream, fill);
        return CUDA_SUCCESS;
    }
    fill();
    return CUDA_SUCCESS;
}

CUresult htod(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream, bool async, const char* call) {
    Context* ctx = nullptr;
    CUresult ok = context_for(stream, async, call, &ctx);
    if (ok == CUDA_SUCCESS) ok = check_device_range(dst, bytes, call, "destination", nullptr);
    if (ok == CUDA_SUCCESS) ok = check_host(src, bytes, call, "source");
    if (ok != CUDA_SUCCESS || bytes == 0) return ok;
    note_upload_source(src, bytes);
    if (async && defer_stream_work()) {
        if (is_pinned(src, bytes)) {
            // Pinned: the DMA reads the buffer when the copy runs.
            defer(ctx, stream, call, [dst, src, bytes] { std::memcpy(reinterpret_cast<void*>(dst), src, bytes); });
            return CUDA_SUCCESS;
        }
        // Pageable: the driver stages the buffer before returning (pinned.h).
        auto staged = std::make_shared<std::vector<unsigned char>>(bytes);
        ok = copy_bytes(staged->data(), src, bytes, call);
        if (ok != CUDA_SUCCESS) return ok;
        defer(ctx, stream, call, [dst, staged] { std::memcpy(reinterpret_cast<void*>(dst), staged->data(), staged->size()); });
        return CUDA_SUCCESS;
    }
    return copy_bytes(reinterpret_cast<void*>(dst), src, bytes, call);
}

CUresult dtoh(void* dst, CUdeviceptr src, size_t bytes, CUstream stream, bool async, const char* call) {
    Context* ctx = nullptr;
    CUresult ok = context_for(stream, async, call, &ctx);
    if (ok == CUDA_SUCCESS) ok = check_device_range(src, bytes, call, "source", nullptr);
    if (ok == CUDA_SUCCESS) ok = check_host(dst, bytes, call, "destination");
    if (ok != CUDA_SUCCESS || bytes == 0) return ok;
    if (async && defer_stream_work()) {
        if (is_pinned(dst, bytes)) {
            // Pinned: written when the copy runs; read before a synchronisation, the
            // buffer still holds what it held before the call.
            defer(ctx, stream, call, [dst, src, bytes] { std::memcpy(dst, reinterpret_cast<const void*>(src), bytes); });
            return CUDA_SUCCESS;
        }
        // Pageable: the driver returns once the copy completed (pinned.h).
        std::lock_guard<std::mutex> guard(state_lock());
        ok = synchronize_stream_work(ctx, stream, call);
        if (ok != CUDA_SUCCESS) return ok;
    }
    return copy_bytes(dst, reinterpret_cast<const void*>(src), bytes, call);
}

CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream, bool async, const char* call) {
    Context* ctx = nullptr;
    Capture* capture = nullptr;
    CUresult ok = context_for(stream, async, call, &ctx, &capture);
    if (ok == CUDA_SUCCESS) ok = check_device_range(dst, bytes, call, "destination", nullptr);
    if (ok == CUDA_SUCCESS) ok = check_device_range(src, bytes, call, "source", nullptr);
    if (ok != CUDA_SUCCESS || bytes == 0) return ok;
    if (capture != nullptr) {
        std::lock_guard<std::mutex> guard(state_lock());
        return record_copy(capture, dst, src, bytes, call);
    }
    if (async && defer_stream_work()) {
        defer(ctx, stream, call, [dst, src, bytes] {
            std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
        });
        return CUDA_SUCCESS;
    }
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
    return CUDA_SUCCESS;
}

// A peer copy names both contexts; each pointer must belong to its context's device.
CUresult peer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t bytes,
              CUstream stream, bool async, const char* call) {
    Context* ctx = nullptr;
    CUresult ok = context_for(stream, async, call, &ctx);
    if (ok != CUDA_SUCCESS) return ok;
    {
        std::lock_guard<std::mutex> guard(state_lock());
        ok = require_live(dst_ctx, call);
        if (ok == CUDA_SUCCESS) ok = require_live(src_ctx, call);
    }
    Allocation d, s;
    if (ok == CUDA_SUCCESS) ok = check_device_range(dst, bytes, call, "destination", &d);
    if (ok == CUDA_SUCCESS) ok = check_device_range(src, bytes, call, "source", &s);
    if (ok != CUDA_SUCCESS) return ok;
    if (d.device != dst_ctx->device || s.device != src_ctx->device) {
        return fail(CUDA_ERROR_INVALID_VALUE, call,
                    "destination is on device %d (context of device %d given), source on device %d "
                    "(context of device %d given)",
                    d.device, dst_ctx->device, s.device, src_ctx->device);
    }
    if (bytes == 0) return CUDA_SUCCESS;
    if (async && defer_stream_work()) {
        defer(ctx, stream, call, [dst, src, bytes] {
            std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
        });
        return CUDA_SUCCESS;
    }
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
    return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuMemAlloc_v2(CUdeviceptr* out, size_t bytes) { return alloc(out, bytes, nullptr, false, "cuMemAlloc_v2"); }

CUresult cuMemAllocAsync(CUdeviceptr* out, size_t bytes, CUstream stream) {
    return alloc(out, bytes, stream, true, "cuMemAllocAsync");
}

CUresult cuMemFree_v2(CUdeviceptr ptr) { return free_ptr(ptr, nullptr, false, "cuMemFree_v2"); }

CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) { return free_ptr(ptr, stream, true, "cuMemFreeAsync"); }

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
    if (free_bytes == nullptr || total_bytes == nullptr) {
        return fail(CUDA_ERROR_INVALID_VALUE, "cuMemGetInfo_v2", "NULL pointer");
    }
    Context* ctx = nullptr;
    const CUresult ok = context_for(nullptr, false, "cuMemGetInfo_v2", &ctx);
    if (ok != CUDA_SUCCESS) return ok;
    *total_bytes = devices()[ctx->device].total_memory;
    *free_bytes = *total_bytes - used_on_device(ctx->device);
    return CUDA_SUCCESS;
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
    return memset_n(dst, v, 1, n, nullptr, false, "cuMemsetD8_v2");
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
    return memset_n(dst, v, 1, n, s, true, "cuMemsetD8Async");
}
CUresult cuMemsetD16_v2(CUdeviceptr dst, unsigned short v, size_t n) {
    return memset_n(dst, v, 2, n, nullptr, false, "cuMemsetD16_v2");
}
CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n, CUstream s) {
    return memset_n(dst, v, 2, n, s, true, "cuMemsetD16Async");
}
CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int v, size_t n) {
    return memset_n(dst, v, 4, n, nullptr, false, "cuMemsetD32_v2");
}
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s) {
    return memset_n(dst, v, 4, n, s, true, "cuMemsetD32Async");
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
    return htod(dst, src, bytes, nullptr, false, "cuMemcpyHtoD_v2");
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, CUstream s) {
    return htod(dst, src, bytes, s, true, "cuMemcpyHtoDAsync_v2");
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
    return dtoh(dst, src, bytes, nullptr, false, "cuMemcpyDtoH_v2");
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream s) {
    return dtoh(dst, src, bytes, s, true, "cuMemcpyDtoHAsync_v2");
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
    return dtod(dst, src, bytes, nullptr, false, "cuMemcpyDtoD_v2");
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s) {
    return dtod(dst, src, bytes, s, true, "cuMemcpyDtoDAsync_v2");
}
CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t bytes) {
    return peer(dst, dc, src, sc, bytes, nullptr, false, "cuMemcpyPeer");
}
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t bytes,
                           CUstream s) {
    return peer(dst, dc, src, sc, bytes, s, true, "cuMemcpyPeerAsync");
}

}  // extern "C"
