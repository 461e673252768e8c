// One rank's communicator: its connection to the clique's hub (nccl_hub.h), the bytes
// that arrived for it, and the waits a collective makes, bounded only by ncclCommAbort
// and the stand-in's safety valve (NCCL itself waits for ever).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "nccl_wire.h"

namespace standin::nccl {

struct Comm;

// ncclGetUniqueId: a random key naming a new clique, and its hub, started in this process.
NcclResult make_unique_id(char id[128]);

// ncclCommInitRank: joins rank `rank` of `nranks`, driving `device`, to the clique `id`
// names, and waits until every rank has joined.
NcclResult join(const char id[128], int nranks, int rank, int device, Comm** out);

// A communicator held for the length of one call (`device`: of the device work a
// collective queued, device_queue.h). ncclCommAbort wakes the device work and waits for
// it to leave; it waits for calls on other threads too in the blocking mode, while in
// the mode where collectives return early it frees the communicator at once, as NCCL
// does, and a call still inside it is a use after free: reported, and every context
// of the process is poisoned. `ok()` is false (and the error recorded) for a handle that
// is not a live communicator: NULL, destroyed or aborted.
class Use {
public:
    Use(Comm* comm, const char* call, bool device = false);
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    bool ok() const { return comm_ != nullptr; }
    NcclResult error() const { return error_; }
    Comm& operator*() const { return *comm_; }

private:
    Comm* comm_ = nullptr;
    bool device_ = false;
    NcclResult error_ = ncclSuccess;
};

// Device work of `comm` failed with `code`: what ncclCommGetAsyncError reports from now.
void set_async_error(Comm* comm, NcclResult code);

// ncclCommInitRankConfig with `blocking = 0`: calls that cannot finish return
// ncclInProgress and ncclCommGetAsyncError says so, instead of blocking.
void set_nonblocking(Comm* comm);

// A collective call that never completes, as NCCL >= 2.22's first collective does while
// it connects lazily to a peer that died (DITTO_CUDA_STANDIN_NCCL_STALL_AT=N: the Nth
// collective call of this process, counting from 1; `stalls_now` counts the call). A
// blocking communicator's call waits until ncclCommAbort (from another thread, which
// NCCL does not allow during a call) or the safety valve; a non-blocking one's returns
// ncclInProgress, and ncclCommGetAsyncError says ncclInProgress until ncclCommAbort.
bool stalls_now();
NcclResult stall(Comm& comm, const char* call);

int rank_of(const Comm& comm);
int size_of(const Comm& comm);
int device_of(const Comm& comm);

// Every rank's bytes for the next collective, in rank order (a rank may give none).
struct Parts {
    std::vector<char> bytes;
    std::vector<std::pair<const char*, size_t>> of_rank;
};
NcclResult exchange(Comm& comm, const char* call, const void* data, size_t length, Parts* parts);

// A send to `peer`, delivered in issue order; it does not wait for the receiver.
NcclResult send_to(Comm& comm, const char* call, int peer, const void* data, size_t length);
// Waits for the next send from `peer`, which must be `length` bytes, into `data`.
NcclResult receive_from(Comm& comm, const char* call, int peer, void* data, size_t length);

// ncclCommGetAsyncError: ncclSuccess while the communicator is healthy, and while it is
// blocked on a peer that died (NCCL sees nothing wrong then either).
NcclResult async_error(Comm& comm);

// ncclCommAbort (releases a call blocked on this communicator, then frees it) and
// ncclCommDestroy (tells the hub this rank left cleanly, then frees it).
NcclResult abort_comm(Comm* comm);
NcclResult destroy_comm(Comm* comm);

}  // namespace standin::nccl
