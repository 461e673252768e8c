// NCCL, host-executed: the calls ditto's NCCL backend makes (crates/distributed/src/nccl.rs), so
// its plumbing (unique id, communicator init, all-reduce, broadcast, all-gather, grouped
// send/recv, abort, async error, destroy) runs in CI without a GPU.
//
// Each rank drives one emulated device, in its own process (one per GPU, as torchrun
// launches them) or as a thread of a shared one (the tests); both join the same way. The
// unique id names a clique and the address and port of its hub (loopback, or the
// interface NCCL_SOCKET_IFNAME selects, for ranks on several hosts), which ncclGetUniqueId
// starts in the calling process (nccl_hub.h), as NCCL's bootstrap root lives in rank 0's
// process. Device memory is host memory here, so a collective copies each rank's buffer
// to the hub and back. Like NCCL's, a collective's call checks its arguments and returns;
// the collective runs later, in stream order, as device work of the stream's context
// (device_queue.h), which the stream's next work, a wait or an event waits for.
// DITTO_CUDA_STANDIN_NCCL_MODE=blocking runs it inside the call instead (the stand-in's
// earlier behaviour, which the checks of a blocked call and its abort use). Every rank receives all ranks' bytes in rank order and sums them in rank
// order 0, 1, ..., n - 1, the same every run and on every rank: a real NCCL sum is only
// reproducible at a fixed world size and algorithm, and ditto's invariant mode never
// relies on it.
//
// Failures are NCCL's (docs/cuda-standin.md, "NCCL"): a collective whose peer died
// blocks; ncclCommAbort from another thread releases it; ncclCommGetAsyncError says
// ncclSuccess meanwhile. Only the stand-in's safety valve, DITTO_CUDA_STANDIN_NCCL_TIMEOUT_S
// (default 600 s), ends a wait NCCL would never end, so a broken test cannot hang CI.
#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "context.h"
#include "device_queue.h"
#include "errors.h"
#include "memory.h"
#include "nccl_comm.h"

using namespace standin::nccl;

namespace {

// ncclDataType_t and ncclRedOp_t values the stand-in handles.
enum { ncclInt8 = 0, ncclUint8, ncclInt32, ncclUint32, ncclInt64, ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64 };
enum { ncclSum = 0 };

constexpr int kVersion = 22707;  // the pinned nvidia-nccl-cu13==2.27.7

size_t type_size(int type) {
    switch (type) {
        case ncclInt8: case ncclUint8: return 1;
        case ncclFloat16: return 2;
        case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
        case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
        default: return 0;
    }
}

// `ptr` holds `bytes` of device memory on the communicator's device.
NcclResult check_buffer(const Comm& comm, const void* ptr, size_t bytes, const char* call, const char* what) {
    if (bytes == 0) return ncclSuccess;
    standin::Allocation a;
    if (standin::check_device_range((CUdeviceptr)ptr, bytes, call, what, &a) != CUDA_SUCCESS) {
        return fail(ncclInvalidArgument, call,
                    std::string(what) + " is not " + std::to_string(bytes) + " bytes of device memory: " +
                        standin::describe_address((uintptr_t)ptr));
    }
    if (a.device != device_of(comm)) {
        return fail(ncclInvalidArgument, call,
                    std::string(what) + " lives on device " + std::to_string(a.device) +
                        ", the communicator on device " + std::to_string(device_of(comm)));
    }
    return ncclSuccess;
}

// `stream` is a live stream of the communicator's device, whose context is `*ctx`.
NcclResult check_stream(const Comm& comm, CUstream stream, const char* call, standin::Context** ctx) {
    std::lock_guard<std::mutex> g(standin::state_lock());
    standin::NoDrain queue;  // the collective queues behind the stream's work
    if (standin::resolve_stream(stream, call, false, ctx) != CUDA_SUCCESS) {
        return fail(ncclUnhandledCudaError, call, "the stream is not a live stream");
    }
    if ((*ctx)->device != device_of(comm)) return fail(ncclInvalidArgument, call, "the stream belongs to another device");
    return ncclSuccess;
}

// Runs `work` (a collective whose arguments passed their checks, holding its own
// device Use) after the work queued on `ctx` and returns at once, or, in the blocking
// mode, runs it now. Queued work reports its failure as NCCL's kernels do: through
// ncclCommGetAsyncError.
NcclResult issue(standin::Context* ctx, CUstream stream, Comm* comm, const char* call,
                 std::function<NcclResult()> work) {
    if (stalls_now()) return stall(*comm, call);
    if (!standin::nccl_returns_early()) return work();
    standin::enqueue_device_work(
        ctx, stream,
        [work, comm] {
            if (NcclResult r = work()) set_async_error(comm, r);
        },
        true);
    return ncclSuccess;
}

// Every rank gave `bytes` (a mismatch is a program whose ranks disagree: NCCL would
// read past a buffer or hang; the stand-in says so).
NcclResult check_parts(const Comm& comm, const Parts& parts, size_t bytes, const char* call) {
    for (int r = 0; r < size_of(comm); ++r) {
        if (parts.of_rank[r].second != bytes) {
            return fail(ncclInvalidUsage, call,
                        "rank " + std::to_string(r) + " gave " + std::to_string(parts.of_rank[r].second) +
                            " bytes, rank " + std::to_string(rank_of(comm)) + " " + std::to_string(bytes));
        }
    }
    return ncclSuccess;
}

template <class T>
void sum_in_rank_order(const Parts& parts, char* out, size_t count) {
    std::vector<T> acc(count);
    std::memcpy(acc.data(), parts.of_rank[0].first, count * sizeof(T));
    for (size_t r = 1; r < parts.of_rank.size(); ++r) {
        const T* v = reinterpret_cast<const T*>(parts.of_rank[r].first);
        for (size_t i = 0; i < count; ++i) acc[i] += v[i];
    }
    std::memcpy(out, acc.data(), count * sizeof(T));
}

// A grouped send or receive, issued at ncclGroupEnd.
struct P2p {
    Comm* comm;
    standin::Context* ctx;
    CUstream stream;
    bool send;
    char* data;
    size_t bytes;
    int peer;
};
thread_local int group_depth = 0;
thread_local std::vector<P2p> group_ops;

NcclResult run_group(const std::vector<P2p>& ops, bool device) {
    const char* call = "ncclGroupEnd";
    // Every send first (they do not wait for their receivers), so ranks receiving from
    // each other cannot deadlock; then each receive, in issue order.
    for (bool sends : {true, false}) {
        for (const P2p& op : ops) {
            if (op.send != sends) continue;
            Use use(op.comm, call, device);
            if (!use.ok()) return use.error();
            NcclResult r = op.send ? send_to(*use, call, op.peer, op.data, op.bytes)
                                   : receive_from(*use, call, op.peer, op.data, op.bytes);
            if (r != ncclSuccess) return r;
        }
    }
    return ncclSuccess;
}

// Runs a group's sends and receives, each stream's after the work queued on it: one
// piece per stream (a group may span the streams of several devices), each its sends
// first. Sends never wait for their receivers, so no piece waits for another forever.
NcclResult issue_group(std::vector<P2p> ops, const char* call) {
    if (ops.empty()) return ncclSuccess;
    if (stalls_now()) {
        Use use(ops.front().comm, call);
        return use.ok() ? stall(*use, call) : use.error();
    }
    if (!standin::nccl_returns_early()) return run_group(ops, false);
    std::vector<std::vector<P2p>> per_stream;
    for (const P2p& op : ops) {
        auto same = [&](const std::vector<P2p>& g) { return g.front().ctx == op.ctx && g.front().stream == op.stream; };
        auto it = std::find_if(per_stream.begin(), per_stream.end(), same);
        if (it == per_stream.end()) {
            per_stream.push_back({op});
        } else {
            it->push_back(op);
        }
    }
    for (std::vector<P2p>& group : per_stream) {
        standin::Context* ctx = group.front().ctx;
        const CUstream stream = group.front().stream;
        Comm* comm = group.front().comm;
        standin::enqueue_device_work(
            ctx, stream,
            [group = std::move(group), comm] {
                if (NcclResult r = run_group(group, true)) set_async_error(comm, r);
            },
            true);
    }
    return ncclSuccess;
}

}  // namespace

extern "C" {

typedef struct { char internal[128]; } ncclUniqueId;
typedef Comm* ncclComm_t;

const char* ncclGetErrorString(int result) {
    switch (result) {
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error";
        case ncclSystemError: return "unhandled system error (" STANDIN_LABEL ")";
        case ncclInternalError: return "internal error";
        case ncclInvalidArgument: return "invalid argument";
        case ncclInvalidUsage: return "invalid usage";
        case ncclRemoteError: return "remote process exited or there was a network error";
        default: return "unknown result code";
    }
}

const char* ncclGetLastError(ncclComm_t) { return last_error(); }

int ncclGetVersion(int* version) {
    if (!version) return fail(ncclInvalidArgument, "ncclGetVersion", "version is NULL");
    *version = kVersion;
    return ncclSuccess;
}

int ncclGetUniqueId(ncclUniqueId* id) {
    if (!id) return fail(ncclInvalidArgument, "ncclGetUniqueId", "uniqueId is NULL");
    return make_unique_id(id->internal);
}

int ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
    const char* call = "ncclCommInitRank";
    if (!out) return fail(ncclInvalidArgument, call, "comm is NULL");
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        return fail(ncclInvalidArgument, call, "rank " + std::to_string(rank) + " is not in 0.." + std::to_string(nranks));
    }
    int device;
    {
        std::lock_guard<std::mutex> g(standin::state_lock());
        standin::Context* ctx = nullptr;
        if (standin::require_current(call, &ctx) != CUDA_SUCCESS) {
            return fail(ncclUnhandledCudaError, call, "no current CUDA context on this thread");
        }
        device = ctx->device;
    }
    return join(id.internal, nranks, rank, device, out);
}

// NCCL 2.27's ncclConfig_t, up to the one field the stand-in reads.
struct ConfigHead {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
};

// Joins inside the call even for a non-blocking communicator (NCCL may answer
// ncclInProgress and join in the background; a caller that polls
// ncclCommGetAsyncError handles both). What `blocking = 0` changes is the stall above.
int ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id, int rank, ConfigHead* config) {
    const char* call = "ncclCommInitRankConfig";
    if (config && (config->magic != 0xcafebeef || config->size < sizeof(ConfigHead))) {
        return fail(ncclInvalidArgument, call, "the config was not made with NCCL_CONFIG_INITIALIZER");
    }
    const int r = ncclCommInitRank(out, nranks, id, rank);
    // NCCL_CONFIG_UNDEF_INT (INT_MIN) means the default, blocking.
    if (r == ncclSuccess && config && config->blocking == 0) set_nonblocking(*out);
    return r;
}

int ncclCommAbort(ncclComm_t comm) { return abort_comm(comm); }

int ncclCommDestroy(ncclComm_t comm) { return destroy_comm(comm); }

// Every operation completes before its call returns, so there is nothing to flush.
int ncclCommFinalize(ncclComm_t comm) {
    Use use(comm, "ncclCommFinalize");
    return use.error();
}

int ncclCommGetAsyncError(ncclComm_t comm, int* async) {
    const char* call = "ncclCommGetAsyncError";
    if (!async) return fail(ncclInvalidArgument, call, "asyncError is NULL");
    Use use(comm, call);
    if (!use.ok()) return use.error();
    *async = async_error(*use);
    return ncclSuccess;
}

int ncclCommCount(ncclComm_t comm, int* count) {
    Use use(comm, "ncclCommCount");
    if (!use.ok()) return use.error();
    if (!count) return fail(ncclInvalidArgument, "ncclCommCount", "count is NULL");
    *count = size_of(*use);
    return ncclSuccess;
}

int ncclCommUserRank(ncclComm_t comm, int* rank) {
    Use use(comm, "ncclCommUserRank");
    if (!use.ok()) return use.error();
    if (!rank) return fail(ncclInvalidArgument, "ncclCommUserRank", "rank is NULL");
    *rank = rank_of(*use);
    return ncclSuccess;
}

int ncclCommCuDevice(ncclComm_t comm, int* device) {
    Use use(comm, "ncclCommCuDevice");
    if (!use.ok()) return use.error();
    if (!device) return fail(ncclInvalidArgument, "ncclCommCuDevice", "device is NULL");
    *device = device_of(*use);
    return ncclSuccess;
}

int ncclAllReduce(const void* send, void* recv, size_t count, int type, int op, ncclComm_t comm, CUstream stream) {
    const char* call = "ncclAllReduce";
    Use use(comm, call);
    if (!use.ok()) return use.error();
    if (op != ncclSum) return fail(ncclInvalidArgument, call, "only ncclSum is emulated");
    const size_t size = type_size(type);
    if (size == 0 || type == ncclFloat16) return fail(ncclInvalidArgument, call, "datatype not emulated");
    const size_t bytes = count * size;
    standin::Context* ctx = nullptr;
    if (NcclResult r = check_stream(*use, stream, call, &ctx)) return r;
    if (NcclResult r = check_buffer(*use, send, bytes, call, "sendbuff")) return r;
    if (NcclResult r = check_buffer(*use, recv, bytes, call, "recvbuff")) return r;
    return issue(ctx, stream, comm, call, [=]() -> NcclResult {
        Use device(comm, call, true);
        if (!device.ok()) return device.error();
        Parts parts;
        if (NcclResult r = exchange(*device, call, send, bytes, &parts)) return r;
        if (NcclResult r = check_parts(*device, parts, bytes, call)) return r;
        if (count == 0) return ncclSuccess;
        char* out = static_cast<char*>(recv);
        switch (type) {
            case ncclInt8: sum_in_rank_order<int8_t>(parts, out, count); break;
            case ncclUint8: sum_in_rank_order<uint8_t>(parts, out, count); break;
            case ncclInt32: sum_in_rank_order<int32_t>(parts, out, count); break;
            case ncclUint32: sum_in_rank_order<uint32_t>(parts, out, count); break;
            case ncclInt64: sum_in_rank_order<int64_t>(parts, out, count); break;
            case ncclUint64: sum_in_rank_order<uint64_t>(parts, out, count); break;
            case ncclFloat32: sum_in_rank_order<float>(parts, out, count); break;
            default: sum_in_rank_order<double>(parts, out, count); break;
        }
        return ncclSuccess;
    });
}

int ncclBroadcast(const void* send, void* recv, size_t count, int type, int root, ncclComm_t comm, CUstream stream) {
    const char* call = "ncclBroadcast";
    Use use(comm, call);
    if (!use.ok()) return use.error();
    const size_t bytes = count * type_size(type);
    if (type_size(type) == 0) return fail(ncclInvalidArgument, call, "unknown datatype");
    if (root < 0 || root >= size_of(*use)) return fail(ncclInvalidArgument, call, "root out of range");
    const bool is_root = rank_of(*use) == root;
    standin::Context* ctx = nullptr;
    if (NcclResult r = check_stream(*use, stream, call, &ctx)) return r;
    if (is_root) {
        if (NcclResult r = check_buffer(*use, send, bytes, call, "sendbuff")) return r;
    }
    if (NcclResult r = check_buffer(*use, recv, bytes, call, "recvbuff")) return r;
    return issue(ctx, stream, comm, call, [=]() -> NcclResult {
        Use device(comm, call, true);
        if (!device.ok()) return device.error();
        // Only the root's bytes travel; the others take part to mark their arrival.
        Parts parts;
        if (NcclResult r = exchange(*device, call, is_root ? send : nullptr, is_root ? bytes : 0, &parts)) return r;
        if (parts.of_rank[root].second != bytes) {
            return fail(ncclInvalidUsage, call,
                        "the root sent " + std::to_string(parts.of_rank[root].second) + " bytes, rank " +
                            std::to_string(rank_of(*device)) + " expected " + std::to_string(bytes));
        }
        if (bytes > 0) std::memcpy(recv, parts.of_rank[root].first, bytes);
        return ncclSuccess;
    });
}

int ncclAllGather(const void* send, void* recv, size_t count, int type, ncclComm_t comm, CUstream stream) {
    const char* call = "ncclAllGather";
    Use use(comm, call);
    if (!use.ok()) return use.error();
    const size_t bytes = count * type_size(type);
    if (type_size(type) == 0) return fail(ncclInvalidArgument, call, "unknown datatype");
    const int n = size_of(*use);
    standin::Context* ctx = nullptr;
    if (NcclResult r = check_stream(*use, stream, call, &ctx)) return r;
    if (NcclResult r = check_buffer(*use, send, bytes, call, "sendbuff")) return r;
    if (NcclResult r = check_buffer(*use, recv, bytes * n, call, "recvbuff")) return r;
    return issue(ctx, stream, comm, call, [=]() -> NcclResult {
        Use device(comm, call, true);
        if (!device.ok()) return device.error();
        Parts parts;
        if (NcclResult r = exchange(*device, call, send, bytes, &parts)) return r;
        if (NcclResult r = check_parts(*device, parts, bytes, call)) return r;
        for (int r = 0; r < n && bytes > 0; ++r) {
            std::memcpy(static_cast<char*>(recv) + r * bytes, parts.of_rank[r].first, bytes);
        }
        return ncclSuccess;
    });
}

int ncclGroupStart() {
    group_depth += 1;
    return ncclSuccess;
}

int ncclGroupEnd() {
    if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd", "no ncclGroupStart to end");
    group_depth -= 1;
    if (group_depth > 0) return ncclSuccess;
    std::vector<P2p> ops;
    ops.swap(group_ops);
    return issue_group(std::move(ops), "ncclGroupEnd");
}

static int p2p(bool is_send, const char* call, void* data, size_t count, int type, int peer, ncclComm_t comm,
               CUstream stream) {
    Use use(comm, call);
    if (!use.ok()) return use.error();
    if (type_size(type) == 0) return fail(ncclInvalidArgument, call, "unknown datatype");
    if (peer < 0 || peer >= size_of(*use)) return fail(ncclInvalidArgument, call, "peer out of range");
    const size_t bytes = count * type_size(type);
    standin::Context* ctx = nullptr;
    if (NcclResult r = check_stream(*use, stream, call, &ctx)) return r;
    if (NcclResult r = check_buffer(*use, data, bytes, call, is_send ? "sendbuff" : "recvbuff")) return r;
    P2p op{comm, ctx, stream, is_send, static_cast<char*>(data), bytes, peer};
    if (group_depth > 0) {
        group_ops.push_back(op);
        return ncclSuccess;
    }
    return issue_group({op}, call);
}

int ncclSend(const void* send, size_t count, int type, int peer, ncclComm_t comm, CUstream stream) {
    return p2p(true, "ncclSend", const_cast<void*>(send), count, type, peer, comm, stream);
}

int ncclRecv(void* recv, size_t count, int type, int peer, ncclComm_t comm, CUstream stream) {
    return p2p(false, "ncclRecv", recv, count, type, peer, comm, stream);
}

}  // extern "C"
