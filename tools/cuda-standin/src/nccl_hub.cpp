// The hub: one accepting thread until the clique is complete, then per rank a reader
// (which acts on what the rank sends) and a writer (which drains what is queued for it),
// so a rank that is slow to read never stops the hub from hearing the others.
#include "nccl_hub.h"
#include "nccl_iface.h"

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nccl_wire.h"

namespace standin::nccl {

namespace {

using Bytes = std::shared_ptr<const std::vector<char>>;

struct Outgoing {
    Kind kind;
    int32_t peer;
    uint64_t seq;
    Bytes payload;  // may be null: no payload
};

// One rank's connection. Its reader thread notices the end; the socket closes when both
// the reader and the writer are done with it.
struct Member {
    explicit Member(int fd) : fd(fd) {}
    ~Member() { close(fd); }
    const int fd;
    int rank = -1;
    bool left = false;    // said Bye (ncclCommDestroy)
    bool closed = false;  // the reader saw the connection end
    bool broken = false;  // a write failed: the rank is gone
    std::deque<Outgoing> queue;
    std::condition_variable ready;
};

// Every rank's part of one collective, in rank order.
struct Pending {
    std::vector<Bytes> parts;
    int posted = 0;
};

struct Hub {
    uint64_t key = 0;
    int listener = -1;
    Clock::time_point created;
    std::mutex lock;
    std::condition_variable drained;
    size_t queued = 0;  // frames queued for all members together
    int nranks = 0;     // set by the first Hello
    std::vector<std::shared_ptr<Member>> members;  // by rank, null until it joins
    std::vector<int> devices;
    int joined = 0;
    bool formed = false;
    std::map<uint64_t, Pending> collectives;
};

std::mutex hubs_lock;
std::map<uint64_t, std::weak_ptr<Hub>> hubs;

template <class F>
bool spawn(F f) {
    try {
        std::thread(std::move(f)).detach();
        return true;
    } catch (...) {
        return false;
    }
}

// Under h.lock. Nothing is queued for a rank whose connection ended: its writer may have
// finished, and the frame would count as undelivered for ever (see drain_hubs).
void enqueue(Hub& h, Member& m, Outgoing o) {
    if (m.broken || m.closed) return;
    m.queue.push_back(std::move(o));
    h.queued += 1;
    m.ready.notify_one();
}

Bytes text(const std::string& s) { return std::make_shared<const std::vector<char>>(s.begin(), s.end()); }

void writer(std::shared_ptr<Hub> hub, std::shared_ptr<Member> m) {
    Hub& h = *hub;
    std::unique_lock<std::mutex> g(h.lock);
    for (;;) {
        m->ready.wait(g, [&] { return !m->queue.empty() || m->closed || m->broken; });
        if (m->queue.empty() || m->broken) break;
        Outgoing o = std::move(m->queue.front());
        m->queue.pop_front();
        g.unlock();
        const Io r = write_frame(m->fd, o.kind, o.peer, o.seq, o.payload ? o.payload->data() : nullptr,
                                 o.payload ? o.payload->size() : 0, Waiter{});
        g.lock();
        h.queued -= 1;
        if (r != Io::Ok) {
            m->broken = true;
            h.queued -= m->queue.size();
            m->queue.clear();
        }
        h.drained.notify_all();
    }
    h.queued -= m->queue.size();
    m->queue.clear();
    h.drained.notify_all();
}

// Under h.lock: once every rank has joined, each is welcomed, or each is told why not.
void form(Hub& h) {
    h.formed = true;
    NcclResult code = ncclSuccess;
    std::string why;
    for (int a = 0; a < h.nranks && code == ncclSuccess; ++a) {
        for (int b = 0; b < a; ++b) {
            if (h.devices[a] == h.devices[b]) {
                // NCCL refuses two ranks on one GPU ("Duplicate GPU detected").
                code = ncclInvalidUsage;
                why = "Duplicate GPU detected: rank " + std::to_string(a) + " and rank " + std::to_string(b) +
                      " both on the stand-in's device #" + std::to_string(h.devices[a]);
                break;
            }
        }
    }
    const Bytes reason = code == ncclSuccess ? nullptr : text(why);
    for (auto& m : h.members) enqueue(h, *m, {Kind::Welcome, code, 0, reason});
}

// Under h.lock: rank `rank`'s part of collective `seq`; when it is the last, every rank
// gets all parts, each as a u64 length then its bytes.
void post(Hub& h, int rank, uint64_t seq, std::vector<char>&& bytes) {
    Pending& p = h.collectives[seq];
    if (p.parts.empty()) p.parts.resize(h.nranks);
    if (p.parts[rank]) return;  // posted twice: a protocol error that only a broken rank makes
    p.parts[rank] = std::make_shared<const std::vector<char>>(std::move(bytes));
    if (++p.posted < h.nranks) return;
    size_t total = 0;
    for (const Bytes& b : p.parts) total += sizeof(uint64_t) + b->size();
    std::shared_ptr<std::vector<char>> all;
    try {
        all = std::make_shared<std::vector<char>>(total);
    } catch (const std::bad_alloc&) {
        // Nobody gets a result: the ranks stay blocked, as NCCL's would on a failed proxy.
        h.collectives.erase(seq);
        return;
    }
    char* at = all->data();
    for (const Bytes& b : p.parts) {
        const uint64_t n = b->size();
        std::memcpy(at, &n, sizeof n);
        if (n > 0) std::memcpy(at + sizeof n, b->data(), n);
        at += sizeof n + n;
    }
    h.collectives.erase(seq);
    for (auto& m : h.members) enqueue(h, *m, {Kind::Result, 0, seq, all});
}

// Reads the Hello; returns the member it joined as, or null (the socket is then closed,
// and nothing of the clique changed).
std::shared_ptr<Member> join(Hub& h, int fd) {
    auto m = std::make_shared<Member>(fd);
    Header head;
    std::vector<char> body;
    const Waiter hello_wait{-1, Clock::now() + std::chrono::seconds(30)};
    if (read_frame(fd, &head, &body, sizeof(Hello), hello_wait) != Io::Ok || head.kind != uint32_t(Kind::Hello) ||
        body.size() != sizeof(Hello)) {
        return nullptr;
    }
    Hello hello;
    std::memcpy(&hello, body.data(), sizeof hello);
    if (std::memcmp(hello.magic, kMagic, sizeof kMagic) != 0 || hello.key != h.key) return nullptr;
    NcclResult code = ncclSuccess;
    std::string why;
    {
        std::lock_guard<std::mutex> g(h.lock);
        if (hello.nranks < 1 || hello.rank < 0 || hello.rank >= hello.nranks) {
            code = ncclInvalidArgument;
            why = "rank " + std::to_string(hello.rank) + " is not in 0.." + std::to_string(hello.nranks);
        } else if (h.formed) {
            code = ncclInvalidUsage;
            why = "every rank of this unique id has already joined";
        } else if (h.nranks != 0 && h.nranks != hello.nranks) {
            code = ncclInvalidUsage;
            why = "nranks " + std::to_string(hello.nranks) + ", another rank said " + std::to_string(h.nranks);
        } else if (h.nranks != 0 && h.members[hello.rank]) {
            code = ncclInvalidUsage;
            why = "rank " + std::to_string(hello.rank) + " joined twice";
        } else {
            if (h.nranks == 0) {
                h.nranks = hello.nranks;
                h.members.resize(h.nranks);
                h.devices.assign(h.nranks, -1);
            }
            m->rank = hello.rank;
            h.members[m->rank] = m;
            h.devices[m->rank] = hello.device;
            h.joined += 1;
        }
    }
    if (code != ncclSuccess) {
        const Waiter short_wait{-1, Clock::now() + std::chrono::seconds(5)};
        write_frame(fd, Kind::Welcome, code, 0, why.data(), why.size(), short_wait);
        return nullptr;
    }
    return m;
}

void reader(std::shared_ptr<Hub> hub, int fd) {
    Hub& h = *hub;
    std::shared_ptr<Member> m = join(h, fd);
    if (!m) return;
    if (!spawn([hub, m] { writer(hub, m); })) {
        std::lock_guard<std::mutex> g(h.lock);
        h.members[m->rank] = nullptr;
        h.joined -= 1;
        return;
    }
    {
        std::lock_guard<std::mutex> g(h.lock);
        if (h.joined == h.nranks && !h.formed) form(h);
    }
    Header head;
    std::vector<char> body;
    for (;;) {
        const Io r = read_frame(m->fd, &head, &body, kMaxPayload, Waiter{});
        std::lock_guard<std::mutex> g(h.lock);
        if (r != Io::Ok) break;
        if (head.kind == uint32_t(Kind::Post) && h.formed) {
            post(h, m->rank, head.seq, std::move(body));
        } else if (head.kind == uint32_t(Kind::Send) && h.formed && head.peer >= 0 && head.peer < h.nranks) {
            // A send to a rank that is gone is dropped; its sender blocks on what it
            // expects back, as it would on NCCL.
            if (auto& to = h.members[head.peer]; to && !to->closed) {
                enqueue(h, *to, {Kind::Deliver, m->rank, 0, std::make_shared<const std::vector<char>>(std::move(body))});
            }
        } else if (head.kind == uint32_t(Kind::Bye)) {
            m->left = true;
        } else {
            break;  // not the protocol: treat as gone
        }
        body = {};
    }
    std::lock_guard<std::mutex> g(h.lock);
    m->closed = true;
    m->ready.notify_all();
    h.drained.notify_all();
    if (!h.formed) {
        // A rank that left before the clique formed frees its slot.
        h.members[m->rank] = nullptr;
        h.joined -= 1;
    } else if (!m->left) {
        for (auto& other : h.members) {
            if (other != m && !other->closed) enqueue(h, *other, {Kind::Gone, m->rank, 0, nullptr});
        }
    }
}

void acceptor(std::shared_ptr<Hub> hub) {
    Hub& h = *hub;
    const auto give_up = h.created + safety_valve();
    for (;;) {
        {
            std::lock_guard<std::mutex> g(h.lock);
            if (h.formed) break;
        }
        if (Clock::now() >= give_up) break;
        pollfd p{h.listener, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0) continue;
        const int fd = accept4(h.listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (!spawn([hub, fd] { reader(hub, fd); })) close(fd);
    }
    close(h.listener);
}

}  // namespace

uint16_t start_hub(uint64_t key, uint32_t address, std::string* why) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *why = std::string("socket: ") + std::strerror(errno);
        return 0;
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = address;
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        *why = "listening on " + address_text(address) + ": " + std::strerror(errno);
        close(fd);
        return 0;
    }
    auto hub = std::make_shared<Hub>();
    hub->key = key;
    hub->listener = fd;
    hub->created = Clock::now();
    {
        std::lock_guard<std::mutex> g(hubs_lock);
        for (auto it = hubs.begin(); it != hubs.end();) it = it->second.expired() ? hubs.erase(it) : std::next(it);
        hubs[key] = hub;
    }
    if (!spawn([hub] { acceptor(hub); })) {
        *why = "could not start the hub's thread";
        close(fd);
        return 0;
    }
    return ntohs(addr.sin_port);
}

void drain_hubs(Clock::time_point deadline) {
    std::vector<std::shared_ptr<Hub>> running;
    {
        std::lock_guard<std::mutex> g(hubs_lock);
        for (auto& entry : hubs) {
            if (auto hub = entry.second.lock()) running.push_back(hub);
        }
    }
    for (const auto& hub : running) {
        std::unique_lock<std::mutex> g(hub->lock);
        hub->drained.wait_until(g, deadline, [&] {
            for (const auto& m : hub->members) {
                if (m && !m->closed) return false;
            }
            return hub->queued == 0;
        });
    }
}

}  // namespace standin::nccl
