// Device work that completes after its call returns: NCCL's collectives, in the NCCL
// mode where they return before completing (the default; nccl.cpp), and host functions
// queued behind them (cuLaunchHostFunc).
//
// In the deferred mode (deferred.h) all stream work is queued here too, and the worker
// holds it until a host thread waits for it or it waited DITTO_CUDA_STANDIN_DEFER_MS.
//
// Otherwise the stand-in runs everything else when it is issued. So the queue of a context is only
// ever drained, never overtaken: every stream-ordered call on the context (a launch, a
// copy, a free, a synchronisation) first waits for the queued work, and an event
// recorded meanwhile completes when the work queued before it did. The program sees
// what a GPU shows: the collective's call returns at once, a stream wait or an event
// query is where a hang shows.
#pragma once

#include <cstdint>
#include <functional>

#include "context.h"

namespace standin {

// True unless DITTO_CUDA_STANDIN_NCCL_MODE=blocking (collectives complete inside their
// calls, and ncclCommAbort waits for a call blocked on the communicator to leave).
bool nccl_returns_early();

// Queues `work` on `ctx`; returns its ticket (1, 2, ...).
uint64_t enqueue_device_work(Context* ctx, std::function<void()> work);
// The ticket of the last work queued on `ctx` (0: none ever).
uint64_t device_work_issued(Context* ctx);
// True once the work with `ticket` (and all before it) ran.
bool device_work_done(Context* ctx, uint64_t ticket);
// True on a queue's worker thread (work it runs is not queued again).
bool on_device_worker();
// Waits until `ticket` ran. Call with state_lock held: it is released while waiting (the
// queued work may need other threads' calls to finish, e.g. a peer's collective).
void wait_device_work(Context* ctx, uint64_t ticket);

// Stream-ordered calls drain the queue (resolve_stream does); these do not: NCCL's own
// calls (which queue), event records and queries, stream queries.
class NoDrain {
public:
    NoDrain();
    ~NoDrain();
    NoDrain(const NoDrain&) = delete;
    NoDrain& operator=(const NoDrain&) = delete;
};
// Waits for everything queued on `ctx` unless a NoDrain is active on this thread. Call
// with state_lock held.
void drain_device_work(Context* ctx);
// A synchronising call's wait: drains `ctx`, then returns the sticky error a fault of
// the drained work left (as a GPU reports an asynchronous fault at the next
// synchronisation), else CUDA_SUCCESS. Call with state_lock held.
CUresult synchronize_device_work(Context* ctx, const char* call);

}  // namespace standin
