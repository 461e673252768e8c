// The deferred mode (DITTO_CUDA_STANDIN_MODE=deferred): stream work runs later, not in
// its call, so a program that relies on the stand-in's eager order shows its bug.
//
// In the default eager mode every launch, copy, memset, free and gemm runs to completion
// inside its call, which is one order a GPU may run them in and the one that hides every
// ordering mistake: a host buffer rewritten or dropped before its asynchronous copy ran,
// a device-to-host result read before the stream was synchronised, a block freed
// asynchronously and then read. In the deferred mode these calls are checked when they
// are issued (the errors a driver returns from the call itself) and queued on their
// stream's queue (device_queue.h); each stream's work runs in its issue order, and only
// when a host thread waits for them (a synchronising call: stream, event or context
// synchronise, a blocking copy or free, a context release) or after they waited
// DITTO_CUDA_STANDIN_DEFER_MS milliseconds (default 20), so a program that polls an
// event still finishes. Pageable host memory is read and written when the copy runs
// (CUDA documents such copies as "might be synchronous", not as synchronous), and a
// fault while queued work runs leaves the context's sticky error set, which the next
// call returns, as a GPU reports an asynchronous fault.
//
// Each stream has its own queue (device_queue.h): work on two streams runs in the order
// the program makes (an event wait, the legacy stream's implicit synchronisation, a host
// wait), and where it makes none, later-issued work runs first, so a missing
// cuStreamWaitEvent shows (docs/cuda-standin.md has the table).
#pragma once

#include <functional>
#include <string>

#include "context.h"

namespace standin {

// True when DITTO_CUDA_STANDIN_MODE=deferred.
bool deferred_mode();
// Non-empty when DITTO_CUDA_STANDIN_MODE names no mode (cuInit fails with it).
const std::string& mode_config_error();
// How long queued work may wait for a synchronising call before it runs anyway.
long defer_ms();

// True when stream work issued now is to be queued: the deferred mode, called from a
// host thread (the queue's worker runs what it is given at once).
bool defer_stream_work();

// Queues `work` (which runs under the fault trap) on `stream` of `ctx`. A fault it meets sets the
// context's sticky error (ILLEGAL_ADDRESS, or LAUNCH_FAILED for SIGFPE) with `what` and
// where it faulted.
void defer(Context* ctx, CUstream stream, std::string what, std::function<void()> work);

}  // namespace standin
