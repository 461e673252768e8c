// A rank's side of the wire. One thread drives a communicator at a time (NCCL's rule);
// another may call ncclCommGetAsyncError or ncclCommAbort on it meanwhile, which is why
// every call holds a `Use` and the abort wakes the holder through an eventfd.
#include "nccl_comm.h"

#include "context.h"
#include "device_queue.h"
#include "errors.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nccl_hub.h"
#include "nccl_iface.h"

namespace standin::nccl {

struct Comm {
    int rank = 0, nranks = 0, device = 0;
    uint64_t key = 0;
    int hub_pid = 0;
    int fd = -1;
    int wake_fd = -1;  // readable once ncclCommAbort was called
    uint64_t next_seq = 0;
    std::map<uint64_t, std::vector<char>> results;
    std::map<int, std::deque<std::vector<char>>> mailboxes;
    std::vector<bool> gone;  // ranks whose connection ended without ncclCommDestroy
    bool hub_gone = false;
    // After the safety valve fired, every call fails with this.
    NcclResult failed = ncclSuccess;
    std::string failure;
    std::atomic<int> async{ncclSuccess};
    bool nonblocking = false;  // ncclCommInitRankConfig with blocking = 0
    std::mutex lock;
    std::condition_variable idle;
    int active = 0;  // calls holding a Use
    int host_active = 0;  // of which calls of the program (not device work)
    const char* host_call = nullptr;  // the last of them to enter
};

namespace {

std::mutex live_lock;
std::set<Comm*> live;

// Connects to the hub at `address:port` (the unique id's); -1 and `*why` when it cannot.
int connect_hub(uint32_t address, uint16_t port, std::string* why) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *why = std::string("socket: ") + std::strerror(errno);
        return -1;
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = address;
    addr.sin_port = htons(port);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        *why = "connecting to " + address_text(address) + ":" + std::to_string(port) + ": " + std::strerror(errno);
        close(fd);
        return -1;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

// Files a frame from the hub where the call waiting for it will look.
void file(Comm& c, const Header& head, std::vector<char>&& body) {
    if (head.kind == uint32_t(Kind::Result)) {
        c.results[head.seq] = std::move(body);
    } else if (head.kind == uint32_t(Kind::Deliver) && head.peer >= 0 && head.peer < c.nranks) {
        c.mailboxes[head.peer].push_back(std::move(body));
    } else if (head.kind == uint32_t(Kind::Gone) && head.peer >= 0 && head.peer < c.nranks) {
        c.gone[head.peer] = true;
    }
}

// What a call that gave up says about who it was waiting for.
std::string who_is_missing(const Comm& c) {
    if (c.hub_gone) {
        return "the hub of this communicator, in the process that made its unique id (pid " +
               std::to_string(c.hub_pid) + "), is gone";
    }
    std::string ranks;
    for (int r = 0; r < c.nranks; ++r) {
        if (c.gone[r]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    }
    if (!ranks.empty()) return "rank(s) " + ranks + " left without ncclCommDestroy (the process died or aborted)";
    return "every rank is still connected; some rank has not made the matching call";
}

// Why a wait ended early: an abort from another thread, or the safety valve.
NcclResult stopped(Comm& c, const char* call, Io why) {
    if (why == Io::Aborted) {
        // NCCL's host-side waits return ncclInternalError once the abort flag is set.
        return fail(ncclInternalError, call, "aborted by ncclCommAbort while waiting for the other ranks");
    }
    c.failed = ncclSystemError;
    c.failure = "still blocked after " + std::to_string(safety_valve().count()) +
                " s, the stand-in's safety valve (DITTO_CUDA_STANDIN_NCCL_TIMEOUT_S; NCCL would keep "
                "waiting): " + who_is_missing(c);
    c.async = ncclSystemError;
    return fail(c.failed, call, c.failure);
}

// Reads frames until `done()`; a hub that is gone makes this block as NCCL would (until
// an abort or the safety valve).
template <class Done>
NcclResult await(Comm& c, const char* call, Done done) {
    const Waiter wait{c.wake_fd, Clock::now() + safety_valve()};
    const uint64_t max_payload = uint64_t(c.nranks) * (kMaxPayload + sizeof(uint64_t));
    while (!done()) {
        if (c.hub_gone) return stopped(c, call, block(wait));
        Header head;
        std::vector<char> body;
        const Io r = read_frame(c.fd, &head, &body, max_payload, wait);
        if (r == Io::Ok) {
            file(c, head, std::move(body));
        } else if (r == Io::Closed || r == Io::Invalid) {
            c.hub_gone = true;
        } else {
            return stopped(c, call, r);
        }
    }
    return ncclSuccess;
}

NcclResult sticky(const Comm& c, const char* call) {
    return c.failed == ncclSuccess ? ncclSuccess : fail(c.failed, call, c.failure);
}

// Closes a communicator no call holds any more: after an abort (no Bye: peers see it
// gone) or a destroy (Bye first). It returns at once, as NCCL's do: a process that runs
// the hub keeps it for the slower ranks until it exits (see at_exit).
NcclResult release(Comm* c, const char* call, bool bye) {
    {
        std::lock_guard<std::mutex> g(live_lock);
        if (live.erase(c) == 0) return fail(ncclInvalidArgument, call, "not a live communicator (destroyed or aborted)");
    }
    if (!bye) {
        const uint64_t one = 1;
        (void)!write(c->wake_fd, &one, sizeof one);
    }
    {
        std::unique_lock<std::mutex> g(c->lock);
        if (!bye && nccl_returns_early() && c->host_active > 0) {
            // NCCL frees the communicator now: the call on the other thread goes on
            // using freed memory. The stand-in keeps the memory but says so and poisons
            // every context, so the program cannot go on as if nothing happened.
            const std::string why = std::string("ncclCommAbort freed the communicator while ") + c->host_call +
                                    " was running on it in another thread (NCCL forbids using a communicator "
                                    "from two threads at once: a use after free on a GPU)";
            say("%s", why.c_str());
            std::lock_guard<std::mutex> state(state_lock());
            for (int d = 0; d < int(devices().size()); ++d) poison(primary_context(d), CUDA_ERROR_ILLEGAL_STATE, why);
        }
        // The device work was woken above; it leaves at once.
        const bool early = nccl_returns_early() && !bye;
        c->idle.wait(g, [&] { return c->active - (early ? c->host_active : 0) == 0; });
    }
    if (bye && !c->hub_gone) {
        write_frame(c->fd, Kind::Bye, c->rank, 0, nullptr, 0, Waiter{-1, Clock::now() + std::chrono::seconds(5)});
    }
    close(c->fd);
    close(c->wake_fd);
    // The object itself stays allocated (emptied): a later call with this handle, such
    // as a second abort, then finds it not live instead of finding a newer communicator
    // that reused its address. A few hundred bytes per communicator ever made.
    c->fd = c->wake_fd = -1;
    c->results.clear();
    c->mailboxes.clear();
    return ncclSuccess;
}

// Run by exit() in a process that started a hub: what the kernel is about to do to this
// process's communicators that were never destroyed (end their connections) is done
// first, then the process waits, at most 10 s, until its hubs have seen every rank leave
// and have written out what they queued (see drain_hubs).
void at_exit() {
    {
        std::lock_guard<std::mutex> g(live_lock);
        for (Comm* c : live) shutdown(c->fd, SHUT_RDWR);
    }
    drain_hubs(Clock::now() + std::chrono::seconds(10));
}

}  // namespace

NcclResult make_unique_id(char id[128]) {
    static std::mutex keys_lock;
    static std::mt19937_64 keys{std::random_device{}()};
    IdBody body{};
    std::memcpy(body.magic, kMagic, sizeof kMagic);
    {
        std::lock_guard<std::mutex> g(keys_lock);
        body.key = keys();
    }
    std::string why;
    if (!hub_address(&body.address, &why)) return fail(ncclSystemError, "ncclGetUniqueId", why);
    body.port = start_hub(body.key, body.address, &why);
    if (body.port == 0) return fail(ncclSystemError, "ncclGetUniqueId", "cannot start the bootstrap hub: " + why);
    static std::once_flag exit_hook;
    std::call_once(exit_hook, [] { std::atexit(at_exit); });
    body.pid = int32_t(getpid());
    std::memset(id, 0, 128);
    std::memcpy(id, &body, sizeof body);
    return ncclSuccess;
}

NcclResult join(const char id[128], int nranks, int rank, int device, Comm** out) {
    const char* call = "ncclCommInitRank";
    IdBody body;
    std::memcpy(&body, id, sizeof body);
    if (std::memcmp(body.magic, kMagic, sizeof kMagic) != 0) {
        return fail(ncclInvalidArgument, call, "the unique id was not made by this stand-in's ncclGetUniqueId");
    }
    std::string why;
    const int fd = connect_hub(body.address, body.port, &why);
    if (fd < 0) {
        return fail(ncclSystemError, call,
                    "cannot reach the hub of this unique id (made by pid " + std::to_string(body.pid) + "): " + why);
    }
    auto c = new Comm;
    c->rank = rank;
    c->nranks = nranks;
    c->device = device;
    c->key = body.key;
    c->hub_pid = body.pid;
    c->fd = fd;
    c->gone.assign(nranks, false);
    c->wake_fd = eventfd(0, EFD_CLOEXEC);
    Hello hello{};
    std::memcpy(hello.magic, kMagic, sizeof kMagic);
    hello.key = body.key;
    hello.nranks = nranks;
    hello.rank = rank;
    // The hub refuses two ranks on one GPU, as NCCL does: the same physical device (the
    // same bus id), not the same ordinal, which CUDA_VISIBLE_DEVICES renumbers.
    hello.device = physical_device(device);
    hello.pid = int32_t(getpid());
    const Waiter wait{-1, Clock::now() + safety_valve()};
    Header head{};
    std::vector<char> reply;
    Io r = c->wake_fd < 0 ? Io::Closed : write_frame(fd, Kind::Hello, rank, 0, &hello, sizeof hello, wait);
    if (r == Io::Ok) r = read_frame(fd, &head, &reply, 4096, wait);
    NcclResult code = ncclSuccess;
    if (r == Io::TimedOut) {
        code = fail(ncclSystemError, call,
                    "not every rank joined within " + std::to_string(safety_valve().count()) +
                        " s, the stand-in's safety valve (DITTO_CUDA_STANDIN_NCCL_TIMEOUT_S; NCCL would keep waiting)");
    } else if (r != Io::Ok || head.kind != uint32_t(Kind::Welcome)) {
        code = fail(ncclSystemError, call, "the bootstrap hub (pid " + std::to_string(body.pid) + ") closed the connection");
    } else if (head.peer != ncclSuccess) {
        code = fail(NcclResult(head.peer), call, std::string(reply.begin(), reply.end()));
    }
    if (code != ncclSuccess) {
        close(fd);
        if (c->wake_fd >= 0) close(c->wake_fd);
        delete c;
        return code;
    }
    {
        std::lock_guard<std::mutex> g(live_lock);
        live.insert(c);
    }
    *out = c;
    return ncclSuccess;
}

Use::Use(Comm* comm, const char* call, bool device) {
    std::lock_guard<std::mutex> g(live_lock);
    if (!comm || live.count(comm) == 0) {
        error_ = fail(ncclInvalidArgument, call,
                      comm ? "not a live communicator (destroyed or aborted)" : "comm is NULL");
        return;
    }
    std::lock_guard<std::mutex> h(comm->lock);
    comm->active += 1;
    if (!device) {
        comm->host_active += 1;
        comm->host_call = call;
    }
    comm_ = comm;
    device_ = device;
}

Use::~Use() {
    if (!comm_) return;
    std::lock_guard<std::mutex> g(comm_->lock);
    comm_->active -= 1;
    if (!device_) comm_->host_active -= 1;
    comm_->idle.notify_all();
}

void set_async_error(Comm* comm, NcclResult code) {
    int healthy = ncclSuccess;
    comm->async.compare_exchange_strong(healthy, code);
}

int rank_of(const Comm& comm) { return comm.rank; }
int size_of(const Comm& comm) { return comm.nranks; }
int device_of(const Comm& comm) { return comm.device; }

NcclResult exchange(Comm& c, const char* call, const void* data, size_t length, Parts* parts) {
    if (NcclResult r = sticky(c, call)) return r;
    const uint64_t seq = c.next_seq++;
    if (!c.hub_gone) {
        const Waiter wait{c.wake_fd, Clock::now() + safety_valve()};
        const Io r = write_frame(c.fd, Kind::Post, c.rank, seq, data, length, wait);
        if (r == Io::Closed) c.hub_gone = true;
        else if (r != Io::Ok) return stopped(c, call, r);
    }
    if (NcclResult r = await(c, call, [&] { return c.results.count(seq) > 0; })) return r;
    parts->bytes = std::move(c.results[seq]);
    c.results.erase(seq);
    parts->of_rank.clear();
    size_t at = 0;
    for (int rank = 0; rank < c.nranks; ++rank) {
        uint64_t n = 0;
        if (parts->bytes.size() - at < sizeof n) return fail(ncclInternalError, call, "a malformed result from the hub");
        std::memcpy(&n, parts->bytes.data() + at, sizeof n);
        at += sizeof n;
        if (parts->bytes.size() - at < n) return fail(ncclInternalError, call, "a malformed result from the hub");
        parts->of_rank.emplace_back(parts->bytes.data() + at, size_t(n));
        at += n;
    }
    return ncclSuccess;
}

NcclResult send_to(Comm& c, const char* call, int peer, const void* data, size_t length) {
    if (NcclResult r = sticky(c, call)) return r;
    if (c.hub_gone) return ncclSuccess;  // the receives that follow block, as on NCCL
    const Waiter wait{c.wake_fd, Clock::now() + safety_valve()};
    const Io r = write_frame(c.fd, Kind::Send, peer, 0, data, length, wait);
    if (r == Io::Closed) c.hub_gone = true;
    else if (r != Io::Ok) return stopped(c, call, r);
    return ncclSuccess;
}

NcclResult receive_from(Comm& c, const char* call, int peer, void* data, size_t length) {
    if (NcclResult r = sticky(c, call)) return r;
    auto& box = c.mailboxes[peer];
    if (NcclResult r = await(c, call, [&] { return !box.empty(); })) return r;
    std::vector<char> bytes = std::move(box.front());
    box.pop_front();
    if (bytes.size() != length) {
        return fail(ncclInvalidUsage, call,
                    "rank " + std::to_string(peer) + " sent " + std::to_string(bytes.size()) + " bytes, rank " +
                        std::to_string(c.rank) + " expected " + std::to_string(length));
    }
    if (length > 0) std::memcpy(data, bytes.data(), length);
    return ncclSuccess;
}

NcclResult async_error(Comm& c) { return NcclResult(c.async.load()); }

void set_nonblocking(Comm* comm) { comm->nonblocking = true; }

bool stalls_now() {
    static const long at = [] {
        const char* v = std::getenv("DITTO_CUDA_STANDIN_NCCL_STALL_AT");
        return v ? std::strtol(v, nullptr, 10) : 0L;
    }();
    static std::atomic<long> calls{0};
    return at > 0 && calls.fetch_add(1) + 1 == at;
}

NcclResult stall(Comm& c, const char* call) {
    say("%s: stalls for ever (DITTO_CUDA_STANDIN_NCCL_STALL_AT), as a lazy connection to a dead peer does", call);
    if (c.nonblocking) {
        c.async = ncclInProgress;
        return ncclInProgress;
    }
    return stopped(c, call, block(Waiter{c.wake_fd, Clock::now() + safety_valve()}));
}

NcclResult abort_comm(Comm* comm) {
    if (!comm) return ncclSuccess;  // as NCCL: aborting NULL is a no-op
    return release(comm, "ncclCommAbort", false);
}

NcclResult destroy_comm(Comm* comm) {
    if (!comm) return ncclSuccess;  // as NCCL
    return release(comm, "ncclCommDestroy", true);
}

}  // namespace standin::nccl
