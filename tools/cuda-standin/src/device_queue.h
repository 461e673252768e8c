// Device work that completes after its call returns: NCCL's collectives, in the NCCL
// mode where they return before completing (the default; nccl.cpp), and host functions
// and memsets queued behind them (cuLaunchHostFunc).
//
// In the deferred mode (deferred.h) all stream work is queued here too, and each piece
// is held until a host thread waits for it or it waited DITTO_CUDA_STANDIN_DEFER_MS.
//
// Every stream has its own queue, run in its issue order; queues of different streams
// are ordered only where the program orders them, as on a GPU: cuStreamWaitEvent, the
// legacy default stream's implicit synchronisation with blocking streams (those created
// without CU_STREAM_NON_BLOCKING), and host waits. One worker thread per context picks
// what runs next (device_queue.cpp says which, so races between streams show);
// collectives and host functions, which may block until a peer or another thread
// arrives, run on a thread of their own so no other stream waits behind them.
//
// In the eager mode every stream-ordered call (a launch, a copy, a free, a
// synchronisation) first waits for all of the context's queued work, so queued work is
// only ever drained, never overtaken; an event recorded meanwhile completes when the work
// before it on its stream did. The program sees what a GPU shows: the collective's call
// returns at once, a stream wait or an event query is where a hang shows.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "context.h"

namespace standin {

// True unless DITTO_CUDA_STANDIN_NCCL_MODE=blocking (collectives complete inside their
// calls, and ncclCommAbort waits for a call blocked on the communicator to leave).
bool nccl_returns_early();

// A queue for a new stream of `ctx` (`flags` as cuStreamCreate took them).
StreamQueue* new_stream_queue(Context* ctx, unsigned flags);
// A stream is being destroyed: its queue leaves the scheduler once its work ran.
void retire_stream_queue(StreamQueue* queue);

// Queues `work` on the queue of `stream` (a live stream of `ctx`, or a default stream
// handle: the legacy stream of `ctx`) behind what the stream must wait for. `may_block`
// work (a collective, a host function) runs on a thread of its own.
Mark enqueue_device_work(Context* ctx, CUstream stream, std::function<void()> work, bool may_block = false);
// Where an event recorded on `stream` now completes (cuEventRecord).
Mark record_mark(Context* ctx, CUstream stream);
// Makes `stream`'s later work wait until `mark` is reached (cuStreamWaitEvent).
void wait_mark_on_stream(Context* ctx, CUstream stream, Mark mark);
// True once `mark` is reached.
bool mark_reached(Mark mark);
// True once everything queued on `stream` ran (cuStreamQuery).
bool stream_idle(Context* ctx, CUstream stream);
// True on a queue's worker threads (work they run is not queued again).
bool on_device_worker();
// Waits until `mark` is reached. Call with state_lock held: it is released while waiting
// (the queued work may need other threads' calls to finish, e.g. a peer's collective).
void wait_mark(Mark mark);

// Stream-ordered calls drain the queue (resolve_stream does); these do not: NCCL's own
// calls (which queue), event records and queries, stream queries.
class NoDrain {
public:
    NoDrain();
    ~NoDrain();
    NoDrain(const NoDrain&) = delete;
    NoDrain& operator=(const NoDrain&) = delete;
};
// Waits for everything queued on every stream of `ctx` unless a NoDrain is active on
// this thread. Call with state_lock held.
void drain_device_work(Context* ctx);
// A synchronising call's wait: drains `ctx`, then returns the sticky error a fault of
// the drained work left (as a GPU reports an asynchronous fault at the next
// synchronisation), else CUDA_SUCCESS. Call with state_lock held.
CUresult synchronize_device_work(Context* ctx, const char* call);
// The same for one stream (cuStreamSynchronize, a pageable copy): waits for what is
// queued on `stream` and what that waits for, and, as an operation issued to it would,
// the legacy stream's wait for the blocking streams (and theirs for the legacy stream).
// Call with state_lock held.
CUresult synchronize_stream_work(Context* ctx, CUstream stream, const char* call);

}  // namespace standin
