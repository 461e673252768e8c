// Primary contexts and the calling thread's current context.
//
// Work never waits here: every call runs to completion before it returns, so a
// synchronisation only reports a sticky error (a fault earlier on that context).
#include "context.h"
#include "device_queue.h"

#include <map>
#include <memory>

#include "errors.h"
#include "graphs.h"
#include "memory.h"
#include "module.h"

namespace standin {
namespace {

thread_local Context* current = nullptr;
// cuCtxPushCurrent / cuCtxPopCurrent's stack below the current context.
thread_local std::vector<Context*> pushed;

std::map<int, std::unique_ptr<Context>>& contexts() {
    static std::map<int, std::unique_ptr<Context>> all;
    return all;
}

bool is_context(Context* ctx) {
    if (ctx == nullptr) return false;
    for (const auto& entry : contexts()) {
        if (entry.second.get() == ctx) return true;
    }
    return false;
}

// Refcount back to 0: the driver destroys the context and everything made in it.
// Work still queued (device_queue.h) runs first, as the driver finishes it.
void destroy(Context* ctx) {
    drain_device_work(ctx);
    free_all_on_device(ctx->device);
    unload_modules_of(ctx);
    ctx->generation += 1;
    ctx->sticky = CUDA_SUCCESS;
    ctx->sticky_reason.clear();
}

}  // namespace

std::mutex& state_lock() {
    static std::mutex lock;
    return lock;
}

Context* current_context() { return current; }

Context* primary_context(int device) {
    auto& slot = contexts()[device];
    if (!slot) {
        slot = std::make_unique<Context>();
        slot->device = device;
    }
    return slot.get();
}

CUresult require_live(Context* ctx, const char* call) {
    if (!is_context(ctx) || ctx->refcount == 0) {
        return fail(CUDA_ERROR_INVALID_CONTEXT, call,
                    "the context is not live (never retained, or released to 0)");
    }
    if (ctx->sticky != CUDA_SUCCESS) {
        return fail(ctx->sticky, call, "the context of device %d has a sticky error from an earlier call: %s",
                    ctx->device, ctx->sticky_reason.c_str());
    }
    return CUDA_SUCCESS;
}

CUresult require_current(const char* call, Context** out) {
    if (current == nullptr) return fail(CUDA_ERROR_INVALID_CONTEXT, call, "no context is current on this thread");
    const CUresult ok = require_live(current, call);
    if (ok == CUDA_SUCCESS) *out = current;
    return ok;
}

void poison(Context* ctx, CUresult code, const std::string& reason) {
    if (ctx->sticky == CUDA_SUCCESS) {
        ctx->sticky = code;
        ctx->sticky_reason = reason;
    }
}

}  // namespace standin

using namespace standin;

extern "C" {

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice device) {
    if (pctx == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, "cuDevicePrimaryCtxRetain", "NULL pointer");
    const CUresult ok = require_device(device, "cuDevicePrimaryCtxRetain");
    if (ok != CUDA_SUCCESS) return ok;
    std::lock_guard<std::mutex> guard(state_lock());
    Context* ctx = primary_context(device);
    ctx->refcount += 1;
    *pctx = ctx;
    return CUDA_SUCCESS;
}

static CUresult primary_release(CUdevice device, const char* call) {
    const CUresult ok = require_device(device, call);
    if (ok != CUDA_SUCCESS) return ok;
    std::lock_guard<std::mutex> guard(state_lock());
    Context* ctx = primary_context(device);
    if (ctx->refcount == 0) {
        return fail(CUDA_ERROR_INVALID_CONTEXT, call, "the primary context of device %d is not retained", device);
    }
    ctx->refcount -= 1;
    if (ctx->refcount == 0) destroy(ctx);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
    return primary_release(device, "cuDevicePrimaryCtxRelease_v2");
}

CUresult cuDevicePrimaryCtxRelease(CUdevice device) {
    return primary_release(device, "cuDevicePrimaryCtxRelease");
}

static CUresult primary_reset(CUdevice device, const char* call) {
    const CUresult ok = require_device(device, call);
    if (ok != CUDA_SUCCESS) return ok;
    std::lock_guard<std::mutex> guard(state_lock());
    destroy(primary_context(device));
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice device) {
    return primary_reset(device, "cuDevicePrimaryCtxReset_v2");
}

CUresult cuDevicePrimaryCtxReset(CUdevice device) {
    return primary_reset(device, "cuDevicePrimaryCtxReset");
}

CUresult cuDevicePrimaryCtxGetState(CUdevice device, unsigned int* flags, int* active) {
    if (flags == nullptr || active == nullptr) {
        return fail(CUDA_ERROR_INVALID_VALUE, "cuDevicePrimaryCtxGetState", "NULL pointer");
    }
    const CUresult ok = require_device(device, "cuDevicePrimaryCtxGetState");
    if (ok != CUDA_SUCCESS) return ok;
    std::lock_guard<std::mutex> guard(state_lock());
    *flags = 0;
    *active = primary_context(device)->refcount > 0 ? 1 : 0;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
    if (pctx == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, "cuCtxGetCurrent", "NULL pointer");
    const CUresult ok = require_init("cuCtxGetCurrent");
    if (ok != CUDA_SUCCESS) return ok;
    *pctx = current;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
    const CUresult ok = require_init("cuCtxSetCurrent");
    if (ok != CUDA_SUCCESS) return ok;
    if (ctx != nullptr) {
        std::lock_guard<std::mutex> guard(state_lock());
        if (!is_context(ctx) || ctx->refcount == 0) {
            return fail(CUDA_ERROR_INVALID_CONTEXT, "cuCtxSetCurrent", "not a live context");
        }
    }
    current = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
    const CUresult ok = require_init("cuCtxPushCurrent_v2");
    if (ok != CUDA_SUCCESS) return ok;
    {
        std::lock_guard<std::mutex> guard(state_lock());
        if (!is_context(ctx) || ctx->refcount == 0) {
            return fail(CUDA_ERROR_INVALID_CONTEXT, "cuCtxPushCurrent_v2", "not a live context");
        }
    }
    pushed.push_back(current);
    current = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
    const CUresult ok = require_init("cuCtxPopCurrent_v2");
    if (ok != CUDA_SUCCESS) return ok;
    if (current == nullptr) return fail(CUDA_ERROR_INVALID_CONTEXT, "cuCtxPopCurrent_v2", "no current context");
    if (pctx != nullptr) *pctx = current;
    current = pushed.empty() ? nullptr : pushed.back();
    if (!pushed.empty()) pushed.pop_back();
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) {
    if (device == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, "cuCtxGetDevice", "NULL pointer");
    std::lock_guard<std::mutex> guard(state_lock());
    Context* ctx = nullptr;
    const CUresult ok = require_current("cuCtxGetDevice", &ctx);
    if (ok != CUDA_SUCCESS) return ok;
    *device = ctx->device;
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) {
    std::lock_guard<std::mutex> guard(state_lock());
    Context* ctx = nullptr;
    CUresult ok = require_current("cuCtxSynchronize", &ctx);
    if (ok == CUDA_SUCCESS) ok = synchronize_device_work(ctx, "cuCtxSynchronize");
    return ok == CUDA_SUCCESS ? check_unsafe_during_capture(ctx, "cuCtxSynchronize") : ok;
}

}  // extern "C"
