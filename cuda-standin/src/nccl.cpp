// NCCL, host-executed: the calls ditto's NCCL backend makes (crates/distributed/src/nccl.rs), so
// its plumbing (unique id, communicator init, all-reduce, broadcast, all-gather, grouped
// send/recv) runs in CI without a GPU.
//
// Ranks are threads of one process, each driving one emulated device (as the real backend
// runs one process per GPU). A unique id carries a key that names a "clique" in this
// process; ncclCommInitRank waits for all `nranks` ranks of it, like NCCL's bootstrap.
// Device memory is host memory here, so a collective is a rendezvous of the ranks'
// buffers followed by plain copies, run when it is issued (the stand-in runs all stream
// work in issue order). Sums go in rank order 0, 1, ..., n - 1, the same every run: a
// real NCCL sum is only reproducible at a fixed world size and algorithm, and ditto's
// invariant mode never relies on it.
//
// Where NCCL would wait forever for a rank that never comes, this waits
// DITTO_CUDA_STANDIN_NCCL_TIMEOUT_S seconds (default 60) and fails with ncclSystemError
// naming the missing ranks, so a broken test ends instead of hanging CI.
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "context.h"
#include "errors.h"
#include "memory.h"

namespace {

// ncclResult_t (NCCL 2.27's numbers, as cudarc's nccl::sys has them).
enum NcclResult : int {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
};

// ncclDataType_t and ncclRedOp_t values the stand-in handles.
enum { ncclInt8 = 0, ncclUint8, ncclInt32, ncclUint32, ncclInt64, ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64 };
enum { ncclSum = 0 };

constexpr int kVersion = 22707;  // the pinned nvidia-nccl-cu13==2.27.7
constexpr char kMagic[16] = "ditto-standin-n";

thread_local std::string last_error;

NcclResult nccl_fail(NcclResult code, const char* call, const std::string& why) {
    last_error = std::string(call) + ": " + why;
    standin::say("%s", last_error.c_str());
    return code;
}

std::chrono::seconds timeout() {
    const char* s = std::getenv("DITTO_CUDA_STANDIN_NCCL_TIMEOUT_S");
    const long v = s ? std::atol(s) : 0;
    return std::chrono::seconds(v > 0 ? v : 60);
}

size_t type_size(int type) {
    switch (type) {
        case ncclInt8: case ncclUint8: return 1;
        case ncclFloat16: return 2;
        case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
        case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
        default: return 0;
    }
}

// One posted send of a grouped send/recv, waiting for its receiver.
struct Send {
    const char* data;
    size_t bytes;
    bool taken = false;
};

// The ranks that share one unique id, and the rendezvous point of their collectives.
struct Clique {
    int nranks;
    std::mutex lock;
    std::condition_variable changed;
    std::vector<int> devices;  // -1 until that rank joined
    int joined = 0;
    // The collective under way: each rank posts its send buffer, then waits for all; the
    // last to finish reading clears the round.
    unsigned long long round = 0;
    std::vector<const char*> posted;
    int arrived = 0, finished = 0;
    bool failed = false;
    // Sends by (from, to), in issue order (NCCL matches send and recv pairs in order).
    std::map<std::pair<int, int>, std::deque<std::shared_ptr<Send>>> mailboxes;
};

struct Comm {
    std::shared_ptr<Clique> clique;
    int rank;
    int device;
};

std::mutex registry_lock;
std::map<unsigned long long, std::weak_ptr<Clique>> registry;

std::string missing_ranks(const std::vector<bool>& here) {
    std::string s;
    for (size_t r = 0; r < here.size(); ++r) {
        if (!here[r]) s += (s.empty() ? "" : ", ") + std::to_string(r);
    }
    return s;
}

// A grouped send or receive, issued at ncclGroupEnd.
struct P2p {
    Comm* comm;
    bool send;
    char* data;
    size_t bytes;
    int peer;
};
thread_local int group_depth = 0;
thread_local std::vector<P2p> group_ops;

// `ptr` holds `bytes` of device memory on the communicator's device, and `stream` is a
// live stream of that device.
NcclResult check_buffer(const Comm* comm, const void* ptr, size_t bytes, const char* call, const char* what) {
    if (bytes == 0) return ncclSuccess;
    standin::Allocation a;
    if (standin::check_device_range((CUdeviceptr)ptr, bytes, call, what, &a) != CUDA_SUCCESS) {
        return nccl_fail(ncclInvalidArgument, call,
                         std::string(what) + " is not " + std::to_string(bytes) + " bytes of device memory: " +
                             standin::describe_address((uintptr_t)ptr));
    }
    if (a.device != comm->device) {
        return nccl_fail(ncclInvalidArgument, call,
                         std::string(what) + " lives on device " + std::to_string(a.device) +
                             ", the communicator on device " + std::to_string(comm->device));
    }
    return ncclSuccess;
}

NcclResult check_stream(const Comm* comm, CUstream stream, const char* call) {
    std::lock_guard<std::mutex> g(standin::state_lock());
    standin::Context* ctx = nullptr;
    if (standin::resolve_stream(stream, call, false, &ctx) != CUDA_SUCCESS) {
        return nccl_fail(ncclUnhandledCudaError, call, "the stream is not a live stream");
    }
    if (ctx->device != comm->device) {
        return nccl_fail(ncclInvalidArgument, call, "the stream belongs to another device");
    }
    return ncclSuccess;
}

// Every rank of the clique calls this with its send buffer; `work(posted)` runs on each
// rank once all have posted, and no rank returns before every rank's work is done (so a
// send buffer stays valid while others read it).
template <class Work>
NcclResult collective(Comm* comm, const char* call, const char* send, Work work) {
    Clique& c = *comm->clique;
    std::unique_lock<std::mutex> g(c.lock);
    if (c.failed) return nccl_fail(ncclSystemError, call, "an earlier collective of this communicator failed");
    const unsigned long long round = c.round;
    c.posted[comm->rank] = send;
    c.arrived += 1;
    c.changed.notify_all();
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    if (!c.changed.wait_until(g, deadline, [&] { return c.arrived == c.nranks || c.round != round || c.failed; })) {
        std::vector<bool> here(c.nranks);
        for (int r = 0; r < c.nranks; ++r) here[r] = c.posted[r] != nullptr;
        c.failed = true;
        c.changed.notify_all();
        return nccl_fail(ncclSystemError, call, "ranks " + missing_ranks(here) + " never joined the collective");
    }
    if (c.failed) return nccl_fail(ncclSystemError, call, "another rank's collective failed");
    g.unlock();
    work(c.posted);
    g.lock();
    c.finished += 1;
    if (c.finished == c.nranks) {
        std::fill(c.posted.begin(), c.posted.end(), nullptr);
        c.arrived = c.finished = 0;
        c.round += 1;
        c.changed.notify_all();
    } else {
        c.changed.wait(g, [&] { return c.round != round || c.failed; });
    }
    return ncclSuccess;
}

template <class T>
void sum_in_rank_order(const std::vector<const char*>& sends, char* out, size_t count) {
    std::vector<T> acc(count);
    std::memcpy(acc.data(), sends[0], count * sizeof(T));
    for (size_t r = 1; r < sends.size(); ++r) {
        const T* v = reinterpret_cast<const T*>(sends[r]);
        for (size_t i = 0; i < count; ++i) acc[i] += v[i];
    }
    std::memcpy(out, acc.data(), count * sizeof(T));
}

NcclResult run_group(std::vector<P2p> ops) {
    const char* call = "ncclGroupEnd";
    // Post every send first, so ranks receiving from each other cannot deadlock.
    std::vector<std::pair<Clique*, std::shared_ptr<Send>>> sent;
    for (const P2p& op : ops) {
        if (!op.send) continue;
        Clique& c = *op.comm->clique;
        auto s = std::make_shared<Send>(Send{op.data, op.bytes});
        std::lock_guard<std::mutex> g(c.lock);
        c.mailboxes[{op.comm->rank, op.peer}].push_back(s);
        c.changed.notify_all();
        sent.emplace_back(&c, s);
    }
    for (const P2p& op : ops) {
        if (op.send) continue;
        Clique& c = *op.comm->clique;
        std::unique_lock<std::mutex> g(c.lock);
        auto& box = c.mailboxes[{op.peer, op.comm->rank}];
        if (!c.changed.wait_for(g, timeout(), [&] { return !box.empty() || c.failed; }) || c.failed) {
            return nccl_fail(ncclSystemError, call,
                             "rank " + std::to_string(op.peer) + " never sent to rank " + std::to_string(op.comm->rank));
        }
        std::shared_ptr<Send> s = box.front();
        box.pop_front();
        if (s->bytes != op.bytes) {
            c.failed = true;
            c.changed.notify_all();
            return nccl_fail(ncclInvalidUsage, call,
                             "rank " + std::to_string(op.peer) + " sent " + std::to_string(s->bytes) +
                                 " bytes, rank " + std::to_string(op.comm->rank) + " expected " +
                                 std::to_string(op.bytes));
        }
        std::memcpy(op.data, s->data, op.bytes);
        s->taken = true;
        c.changed.notify_all();
    }
    // A send buffer must outlive its receiver's copy.
    for (auto& [c, s] : sent) {
        std::unique_lock<std::mutex> g(c->lock);
        if (!c->changed.wait_for(g, timeout(), [&] { return s->taken || c->failed; }) || c->failed) {
            return nccl_fail(ncclSystemError, call, "a peer never received a send");
        }
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
        default: return "unknown result code";
    }
}

const char* ncclGetLastError(ncclComm_t) { return last_error.c_str(); }

int ncclGetVersion(int* version) {
    if (!version) return nccl_fail(ncclInvalidArgument, "ncclGetVersion", "version is NULL");
    *version = kVersion;
    return ncclSuccess;
}

int ncclGetUniqueId(ncclUniqueId* id) {
    if (!id) return nccl_fail(ncclInvalidArgument, "ncclGetUniqueId", "uniqueId is NULL");
    static std::mt19937_64 keys{std::random_device{}()};
    std::lock_guard<std::mutex> g(registry_lock);
    const unsigned long long key = keys();
    std::memset(id->internal, 0, sizeof id->internal);
    std::memcpy(id->internal, kMagic, sizeof kMagic);
    std::memcpy(id->internal + sizeof kMagic, &key, sizeof key);
    return ncclSuccess;
}

int ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
    const char* call = "ncclCommInitRank";
    if (!out) return nccl_fail(ncclInvalidArgument, call, "comm is NULL");
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        return nccl_fail(ncclInvalidArgument, call,
                         "rank " + std::to_string(rank) + " is not in 0.." + std::to_string(nranks));
    }
    if (std::memcmp(id.internal, kMagic, sizeof kMagic) != 0) {
        return nccl_fail(ncclInvalidArgument, call, "the unique id was not made by this stand-in's ncclGetUniqueId");
    }
    int device;
    {
        std::lock_guard<std::mutex> g(standin::state_lock());
        standin::Context* ctx = nullptr;
        if (standin::require_current(call, &ctx) != CUDA_SUCCESS) {
            return nccl_fail(ncclUnhandledCudaError, call, "no current CUDA context on this thread");
        }
        device = ctx->device;
    }
    unsigned long long key;
    std::memcpy(&key, id.internal + sizeof kMagic, sizeof key);
    std::shared_ptr<Clique> clique;
    {
        std::lock_guard<std::mutex> g(registry_lock);
        clique = registry[key].lock();
        if (!clique) {
            clique = std::make_shared<Clique>();
            clique->nranks = nranks;
            clique->devices.assign(nranks, -1);
            clique->posted.assign(nranks, nullptr);
            registry[key] = clique;
        }
    }
    Clique& c = *clique;
    std::unique_lock<std::mutex> g(c.lock);
    if (c.nranks != nranks) {
        return nccl_fail(ncclInvalidUsage, call,
                         "nranks " + std::to_string(nranks) + ", another rank said " + std::to_string(c.nranks));
    }
    if (c.devices[rank] != -1) return nccl_fail(ncclInvalidUsage, call, "rank " + std::to_string(rank) + " joined twice");
    c.devices[rank] = device;
    c.joined += 1;
    c.changed.notify_all();
    if (!c.changed.wait_for(g, timeout(), [&] { return c.joined == c.nranks; })) {
        std::vector<bool> here(nranks);
        for (int r = 0; r < nranks; ++r) here[r] = c.devices[r] != -1;
        c.devices[rank] = -1;
        c.joined -= 1;
        return nccl_fail(ncclSystemError, call,
                         "ranks " + missing_ranks(here) +
                             " never joined (the stand-in joins ranks that are threads of one process)");
    }
    *out = new Comm{clique, rank, device};
    return ncclSuccess;
}

int ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    {
        // Peers blocked in a collective with this rank give up instead of waiting.
        std::lock_guard<std::mutex> g(comm->clique->lock);
        if (comm->clique->arrived > 0) comm->clique->failed = true;
        comm->clique->changed.notify_all();
    }
    delete comm;
    return ncclSuccess;
}

int ncclCommDestroy(ncclComm_t comm) {
    delete comm;
    return ncclSuccess;
}

int ncclCommCount(ncclComm_t comm, int* count) {
    if (!comm || !count) return nccl_fail(ncclInvalidArgument, "ncclCommCount", "NULL argument");
    *count = comm->clique->nranks;
    return ncclSuccess;
}

int ncclCommUserRank(ncclComm_t comm, int* rank) {
    if (!comm || !rank) return nccl_fail(ncclInvalidArgument, "ncclCommUserRank", "NULL argument");
    *rank = comm->rank;
    return ncclSuccess;
}

int ncclCommCuDevice(ncclComm_t comm, int* device) {
    if (!comm || !device) return nccl_fail(ncclInvalidArgument, "ncclCommCuDevice", "NULL argument");
    *device = comm->device;
    return ncclSuccess;
}

int ncclAllReduce(const void* send, void* recv, size_t count, int type, int op, ncclComm_t comm, CUstream stream) {
    const char* call = "ncclAllReduce";
    if (!comm) return nccl_fail(ncclInvalidArgument, call, "comm is NULL");
    if (op != ncclSum) return nccl_fail(ncclInvalidArgument, call, "only ncclSum is emulated");
    const size_t size = type_size(type);
    if (size == 0 || type == ncclFloat16) return nccl_fail(ncclInvalidArgument, call, "datatype not emulated");
    if (NcclResult r = check_stream(comm, stream, call)) return r;
    if (NcclResult r = check_buffer(comm, send, count * size, call, "sendbuff")) return r;
    if (NcclResult r = check_buffer(comm, recv, count * size, call, "recvbuff")) return r;
    return collective(comm, call, static_cast<const char*>(send), [&](const std::vector<const char*>& sends) {
        char* out = static_cast<char*>(recv);
        switch (type) {
            case ncclInt8: sum_in_rank_order<int8_t>(sends, out, count); break;
            case ncclUint8: sum_in_rank_order<uint8_t>(sends, out, count); break;
            case ncclInt32: sum_in_rank_order<int32_t>(sends, out, count); break;
            case ncclUint32: sum_in_rank_order<uint32_t>(sends, out, count); break;
            case ncclInt64: sum_in_rank_order<int64_t>(sends, out, count); break;
            case ncclUint64: sum_in_rank_order<uint64_t>(sends, out, count); break;
            case ncclFloat32: sum_in_rank_order<float>(sends, out, count); break;
            default: sum_in_rank_order<double>(sends, out, count); break;
        }
    });
}

int ncclBroadcast(const void* send, void* recv, size_t count, int type, int root, ncclComm_t comm, CUstream stream) {
    const char* call = "ncclBroadcast";
    if (!comm) return nccl_fail(ncclInvalidArgument, call, "comm is NULL");
    const size_t bytes = count * type_size(type);
    if (type_size(type) == 0) return nccl_fail(ncclInvalidArgument, call, "unknown datatype");
    if (root < 0 || root >= comm->clique->nranks) return nccl_fail(ncclInvalidArgument, call, "root out of range");
    if (NcclResult r = check_stream(comm, stream, call)) return r;
    if (comm->rank == root) {
        if (NcclResult r = check_buffer(comm, send, bytes, call, "sendbuff")) return r;
    }
    if (NcclResult r = check_buffer(comm, recv, bytes, call, "recvbuff")) return r;
    // Non-root ranks post their receive buffer's address only to mark their arrival.
    const char* mine = comm->rank == root ? static_cast<const char*>(send) : static_cast<const char*>(recv);
    // A zero-length broadcast still needs a non-null marker.
    static const char marker = 0;
    return collective(comm, call, mine ? mine : &marker, [&](const std::vector<const char*>& posted) {
        if (posted[root] != recv) std::memmove(recv, posted[root], bytes);
    });
}

int ncclAllGather(const void* send, void* recv, size_t count, int type, ncclComm_t comm, CUstream stream) {
    const char* call = "ncclAllGather";
    if (!comm) return nccl_fail(ncclInvalidArgument, call, "comm is NULL");
    const size_t bytes = count * type_size(type);
    if (type_size(type) == 0) return nccl_fail(ncclInvalidArgument, call, "unknown datatype");
    const int n = comm->clique->nranks;
    if (NcclResult r = check_stream(comm, stream, call)) return r;
    if (NcclResult r = check_buffer(comm, send, bytes, call, "sendbuff")) return r;
    if (NcclResult r = check_buffer(comm, recv, bytes * n, call, "recvbuff")) return r;
    static const char marker = 0;
    const char* mine = send ? static_cast<const char*>(send) : &marker;
    return collective(comm, call, mine, [&](const std::vector<const char*>& sends) {
        for (int r = 0; r < n; ++r) std::memmove(static_cast<char*>(recv) + r * bytes, sends[r], bytes);
    });
}

int ncclGroupStart() {
    group_depth += 1;
    return ncclSuccess;
}

int ncclGroupEnd() {
    if (group_depth == 0) return nccl_fail(ncclInvalidUsage, "ncclGroupEnd", "no ncclGroupStart to end");
    group_depth -= 1;
    if (group_depth > 0) return ncclSuccess;
    std::vector<P2p> ops;
    ops.swap(group_ops);
    return run_group(std::move(ops));
}

static int p2p(bool is_send, const char* call, void* data, size_t count, int type, int peer, ncclComm_t comm,
               CUstream stream) {
    if (!comm) return nccl_fail(ncclInvalidArgument, call, "comm is NULL");
    if (type_size(type) == 0) return nccl_fail(ncclInvalidArgument, call, "unknown datatype");
    if (peer < 0 || peer >= comm->clique->nranks) return nccl_fail(ncclInvalidArgument, call, "peer out of range");
    const size_t bytes = count * type_size(type);
    if (NcclResult r = check_stream(comm, stream, call)) return r;
    if (NcclResult r = check_buffer(comm, data, bytes, call, is_send ? "sendbuff" : "recvbuff")) return r;
    P2p op{comm, is_send, static_cast<char*>(data), bytes, peer};
    if (group_depth > 0) {
        group_ops.push_back(op);
        return ncclSuccess;
    }
    return run_group({op});
}

int ncclSend(const void* send, size_t count, int type, int peer, ncclComm_t comm, CUstream stream) {
    return p2p(true, "ncclSend", const_cast<void*>(send), count, type, peer, comm, stream);
}

int ncclRecv(void* recv, size_t count, int type, int peer, ncclComm_t comm, CUstream stream) {
    return p2p(false, "ncclRecv", recv, count, type, peer, comm, stream);
}

}  // extern "C"
