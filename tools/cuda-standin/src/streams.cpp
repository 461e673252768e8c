// Streams and events: handles checked the way the driver does (a destroyed stream, an
// event recorded on another context's stream), each stream with its own queue of device
// work (device_queue.h: NCCL's collectives, and in the deferred mode all stream work).
// An event completes when the work before it on its stream ran; a stream's host wait
// runs that stream's work and what it waits for, not the other streams'.
#include <set>

#include "context.h"
#include "deferred.h"
#include "device_queue.h"
#include "errors.h"
#include "graphs.h"

namespace standin {
namespace {

std::set<Stream*>& streams() {
    static std::set<Stream*> all;
    return all;
}

std::set<Event*>& events() {
    static std::set<Event*> all;
    return all;
}

bool is_default(CUstream s) {
    return s == nullptr || s == STANDIN_STREAM_LEGACY || s == STANDIN_STREAM_PER_THREAD;
}

CUresult live_event(CUevent event, const char* call) {
    if (events().count(event) == 0) return fail(CUDA_ERROR_INVALID_HANDLE, call, "not a live event");
    if (event->generation != event->ctx->generation) {
        return fail(CUDA_ERROR_INVALID_HANDLE, call, "the context of the event was destroyed");
    }
    return require_live(event->ctx, call);
}

}  // namespace

CUresult resolve_stream(CUstream stream, const char* call, bool current_only, Context** out) {
    if (is_default(stream)) {
        const CUresult ok = require_current(call, out);
        if (ok == CUDA_SUCCESS && !deferred_mode()) drain_device_work(*out);
        return ok;
    }
    if (streams().count(stream) == 0) return fail(CUDA_ERROR_INVALID_HANDLE, call, "not a live stream");
    Context* ctx = stream->ctx;
    if (stream->generation != ctx->generation) {
        return fail(CUDA_ERROR_INVALID_HANDLE, call, "the context of the stream was destroyed");
    }
    const CUresult ok = require_live(ctx, call);
    if (ok != CUDA_SUCCESS) return ok;
    if (current_only && ctx != current_context()) {
        return fail(CUDA_ERROR_INVALID_HANDLE, call,
                    "the stream belongs to the context of device %d, which is not current", ctx->device);
    }
    // Deferred (deferred.h): only calls that synchronise wait for the queue.
    if (!deferred_mode()) drain_device_work(ctx);
    *out = ctx;
    return CUDA_SUCCESS;
}

}  // namespace standin

using namespace standin;

extern "C" {

static CUresult create_stream(CUstream* out, unsigned flags, const char* call) {
    if (out == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, call, "NULL pointer");
    if (flags > 1) return fail(CUDA_ERROR_INVALID_VALUE, call, "unknown flags %#x", flags);
    std::lock_guard<std::mutex> guard(state_lock());
    Context* ctx = nullptr;
    const CUresult ok = require_current(call, &ctx);
    if (ok != CUDA_SUCCESS) return ok;
    Stream* s = new Stream{ctx, ctx->generation, flags, new_stream_queue(ctx, flags)};
    streams().insert(s);
    *out = s;
    return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream* out, unsigned int flags) {
    return create_stream(out, flags, "cuStreamCreate");
}

CUresult cuStreamCreateWithPriority(CUstream* out, unsigned int flags, int /*priority*/) {
    return create_stream(out, flags, "cuStreamCreateWithPriority");
}

CUresult cuStreamDestroy_v2(CUstream stream) {
    std::lock_guard<std::mutex> guard(state_lock());
    if (is_default(stream) || streams().count(stream) == 0) {
        return fail(CUDA_ERROR_INVALID_HANDLE, "cuStreamDestroy_v2", "not a stream this process created");
    }
    if (stream->capture != nullptr) {
        return fail(CUDA_ERROR_ILLEGAL_STATE, "cuStreamDestroy_v2", "the stream is capturing (end the capture first)");
    }
    streams().erase(stream);
    retire_stream_queue(stream->queue);  // work queued on it still runs
    delete stream;
    return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream stream) {
    std::lock_guard<std::mutex> guard(state_lock());
    Context* ctx = nullptr;
    CUresult ok = resolve_stream(stream, "cuStreamSynchronize", false, &ctx);
    if (ok == CUDA_SUCCESS) ok = synchronize_stream_work(ctx, stream, "cuStreamSynchronize");
    if (ok != CUDA_SUCCESS) return ok;
    if (Capture* capture = capture_of(stream)) {
        return refuse_in_capture(capture, "cuStreamSynchronize", "waiting for the stream");
    }
    return check_unsafe_during_capture(ctx, "cuStreamSynchronize");
}

CUresult cuStreamQuery(CUstream stream) {
    std::lock_guard<std::mutex> guard(state_lock());
    NoDrain query;
    Context* ctx = nullptr;
    const CUresult ok = resolve_stream(stream, "cuStreamQuery", false, &ctx);
    if (ok != CUDA_SUCCESS) return ok;
    return stream_idle(ctx, stream) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

// The stream's later work waits until the event's work ran; the host does not wait.
CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
    if (flags > 1) return fail(CUDA_ERROR_INVALID_VALUE, "cuStreamWaitEvent", "unknown flags %#x", flags);
    std::lock_guard<std::mutex> guard(state_lock());
    Context* ctx = nullptr;
    NoDrain wait;
    CUresult ok = resolve_stream(stream, "cuStreamWaitEvent", false, &ctx);
    if (ok == CUDA_SUCCESS) ok = live_event(event, "cuStreamWaitEvent");
    if (ok != CUDA_SUCCESS) return ok;
    wait_mark_on_stream(ctx, stream, event->mark);
    return CUDA_SUCCESS;
}

CUresult cuStreamGetCtx(CUstream stream, CUcontext* pctx) {
    if (pctx == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, "cuStreamGetCtx", "NULL pointer");
    std::lock_guard<std::mutex> guard(state_lock());
    return resolve_stream(stream, "cuStreamGetCtx", false, pctx);
}

CUresult cuEventCreate(CUevent* out, unsigned int flags) {
    if (out == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, "cuEventCreate", "NULL pointer");
    if (flags > 0xF) return fail(CUDA_ERROR_INVALID_VALUE, "cuEventCreate", "unknown flags %#x", flags);
    std::lock_guard<std::mutex> guard(state_lock());
    Context* ctx = nullptr;
    const CUresult ok = require_current("cuEventCreate", &ctx);
    if (ok != CUDA_SUCCESS) return ok;
    Event* e = new Event{ctx, ctx->generation, flags, false, Mark{}};
    events().insert(e);
    *out = e;
    return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent event) {
    std::lock_guard<std::mutex> guard(state_lock());
    if (events().count(event) == 0) return fail(CUDA_ERROR_INVALID_HANDLE, "cuEventDestroy_v2", "not a live event");
    events().erase(event);
    delete event;
    return CUDA_SUCCESS;
}

// An event may only be recorded on a stream of its own context (the driver's rule).
CUresult cuEventRecord(CUevent event, CUstream stream) {
    std::lock_guard<std::mutex> guard(state_lock());
    CUresult ok = live_event(event, "cuEventRecord");
    if (ok != CUDA_SUCCESS) return ok;
    Context* ctx = nullptr;
    NoDrain record;
    ok = resolve_stream(stream, "cuEventRecord", false, &ctx);
    if (ok != CUDA_SUCCESS) return ok;
    if (ctx != event->ctx) {
        return fail(CUDA_ERROR_INVALID_HANDLE, "cuEventRecord",
                    "event of device %d recorded on a stream of device %d", event->ctx->device, ctx->device);
    }
    event->recorded = true;
    event->mark = record_mark(ctx, stream);
    return CUDA_SUCCESS;
}

CUresult cuEventSynchronize(CUevent event) {
    std::lock_guard<std::mutex> guard(state_lock());
    const CUresult ok = live_event(event, "cuEventSynchronize");
    if (ok != CUDA_SUCCESS) return ok;
    wait_mark(event->mark);
    return require_live(event->ctx, "cuEventSynchronize");  // a fault of the awaited work
}

CUresult cuEventQuery(CUevent event) {
    std::lock_guard<std::mutex> guard(state_lock());
    const CUresult ok = live_event(event, "cuEventQuery");
    if (ok != CUDA_SUCCESS) return ok;
    return mark_reached(event->mark) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

// A host function runs in stream order: behind queued device work it is queued too (a
// test stands long GPU work before a collective in with it), else it runs now. As on
// CUDA, it must not call CUDA itself.
CUresult cuLaunchHostFunc(CUstream stream, void (*fn)(void*), void* data) {
    if (fn == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, "cuLaunchHostFunc", "NULL function");
    Context* ctx = nullptr;
    {
        std::lock_guard<std::mutex> guard(state_lock());
        NoDrain queue;
        const CUresult ok = resolve_stream(stream, "cuLaunchHostFunc", false, &ctx);
        if (ok != CUDA_SUCCESS) return ok;
        if (capture_of(stream) != nullptr) {
            return refuse_in_capture(capture_of(stream), "cuLaunchHostFunc", "a host function");
        }
        if (nccl_returns_early() || defer_stream_work()) {
            enqueue_device_work(ctx, stream, [fn, data] { fn(data); }, true);
            return CUDA_SUCCESS;
        }
    }
    fn(data);
    return CUDA_SUCCESS;
}

// The host runs kernels one thread at a time: no time it measured would mean anything.
static CUresult elapsed(float* ms, CUevent start, CUevent end, const char* call) {
    if (ms == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, call, "NULL pointer");
    std::lock_guard<std::mutex> guard(state_lock());
    CUresult ok = live_event(start, call);
    if (ok == CUDA_SUCCESS) ok = live_event(end, call);
    if (ok != CUDA_SUCCESS) return ok;
    if (((start->flags | end->flags) & 0x2) != 0) {
        return fail(CUDA_ERROR_INVALID_HANDLE, call, "an event was created with CU_EVENT_DISABLE_TIMING");
    }
    return not_supported(call, "a host-executed stand-in has no GPU time to report");
}

CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
    return elapsed(ms, start, end, "cuEventElapsedTime");
}

CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
    return elapsed(ms, start, end, "cuEventElapsedTime_v2");
}

}  // extern "C"
