// Device work that completes after its call returns, one queue per stream
// (device_queue.h). One worker thread per context runs the pieces whose turn came; the
// order between streams is chosen so that missing synchronisation shows (pick below).
#include "device_queue.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "deferred.h"

namespace standin {

using Clock = std::chrono::steady_clock;

namespace {

struct Piece {
    std::function<void()> work;
    Clock::time_point issued_at;
    uint64_t ticket;            // its place in its stream's queue (1, 2, ...)
    uint64_t serial;            // its place among all pieces issued in the process
    std::vector<Mark> waits;    // other streams' points it may not run before
    bool may_block;
};

struct Scheduler;

}  // namespace

struct StreamQueue {
    Scheduler* scheduler = nullptr;
    bool legacy = false;    // the context's default stream
    bool blocking = false;  // synchronises with the legacy stream (no CU_STREAM_NON_BLOCKING)
    bool retired = false;
    bool running = false;
    std::deque<Piece> work;
    uint64_t issued = 0;
    uint64_t done = 0;
    // The highest ticket a host wait (or a released piece of another stream) needs: the
    // deferred mode holds pieces above it until they are DITTO_CUDA_STANDIN_DEFER_MS old.
    uint64_t wanted = 0;
};

namespace {

struct Scheduler {
    StreamQueue* legacy = nullptr;
    std::vector<StreamQueue*> queues;  // the legacy stream's first
};

// One lock and one signal for every queue of the process: a stream of one device may
// wait for an event of another.
std::mutex& lock() {
    static std::mutex* m = new std::mutex;
    return *m;
}
std::condition_variable& changed() {
    static std::condition_variable* c = new std::condition_variable;
    return *c;
}

thread_local int no_drain_depth = 0;
thread_local bool is_worker = false;
uint64_t serials = 0;  // under lock()

bool reached(const Mark& m) { return m.queue == nullptr || m.queue->done >= m.ticket; }

bool all_reached(const std::vector<Mark>& marks) {
    return std::all_of(marks.begin(), marks.end(), reached);
}

// What work issued now on `q` waits for besides its own queue: the legacy stream waits
// for every blocking stream, a blocking stream for the legacy stream (under lock()).
std::vector<Mark> implicit_waits(const StreamQueue* q) {
    std::vector<Mark> out;
    for (StreamQueue* other : q->scheduler->queues) {
        if (other == q || other->done >= other->issued) continue;
        if ((q->legacy && other->blocking) || (q->blocking && other->legacy)) out.push_back(Mark{other, other->issued});
    }
    return out;
}

bool released(const StreamQueue* q, const Piece& p, Clock::time_point now, std::chrono::milliseconds patience) {
    return !deferred_mode() || q->wanted >= p.ticket || now >= p.issued_at + patience;
}

// The stream whose front piece runs next, or nullptr (then `*wake` is when a held piece
// comes of age). A front piece may run once it is released and what it waits for ran.
// Of those, the one issued LAST runs first: a GPU gives no order between streams, and
// the reverse of issue order is the one that makes a missing cuStreamWaitEvent give
// wrong results instead of the right ones. Under lock().
StreamQueue* pick(Scheduler* s, Clock::time_point* wake) {
    const auto patience = std::chrono::milliseconds(defer_ms());
    const Clock::time_point now = Clock::now();
    // A released piece releases what it waits for, on any stream (a host wait on B
    // runs what B waits for on A, and no more).
    for (bool grew = true; grew;) {
        grew = false;
        for (StreamQueue* q : s->queues) {
            if (q->work.empty() || !released(q, q->work.front(), now, patience)) continue;
            for (const Mark& m : q->work.front().waits) {
                if (!reached(m) && m.queue->wanted < m.ticket) {
                    m.queue->wanted = m.ticket;
                    grew = true;
                    if (m.queue->scheduler != s) changed().notify_all();
                }
            }
        }
    }
    StreamQueue* best = nullptr;
    *wake = Clock::time_point::max();
    for (StreamQueue* q : s->queues) {
        if (q->running || q->work.empty()) continue;
        const Piece& front = q->work.front();
        if (!released(q, front, now, patience)) {
            *wake = std::min(*wake, front.issued_at + patience);
            continue;
        }
        if (!all_reached(front.waits)) continue;
        if (best == nullptr || front.serial > best->work.front().serial) best = q;
    }
    // Retired streams whose work all ran leave the scheduler (their queue stays: events
    // recorded on them still name it).
    s->queues.erase(std::remove_if(s->queues.begin(), s->queues.end(),
                                   [](StreamQueue* q) { return q->retired && !q->running && q->work.empty(); }),
                    s->queues.end());
    return best;
}

void finish(StreamQueue* q) {
    q->done += 1;
    q->running = false;
    changed().notify_all();
}

void run(Scheduler* s) {
    is_worker = true;
    std::unique_lock<std::mutex> g(lock());
    for (;;) {
        Clock::time_point wake;
        StreamQueue* q = pick(s, &wake);
        if (q == nullptr) {
            if (wake == Clock::time_point::max()) {
                changed().wait(g);
            } else {
                changed().wait_until(g, wake);
            }
            continue;
        }
        Piece next = std::move(q->work.front());
        q->work.pop_front();
        q->running = true;
        if (next.may_block) {
            // A collective waits for its peers, a host function for whatever it waits for:
            // on a thread of its own, so the other streams go on (as on a GPU).
            std::thread([q, work = std::move(next.work)] {
                is_worker = true;
                work();
                std::lock_guard<std::mutex> done(lock());
                finish(q);
            }).detach();
            continue;
        }
        g.unlock();
        next.work();
        g.lock();
        finish(q);
    }
}

StreamQueue* new_queue(Scheduler* s, bool legacy, bool blocking) {
    StreamQueue* q = new StreamQueue;
    q->scheduler = s;
    q->legacy = legacy;
    q->blocking = blocking;
    return q;
}

// The scheduler of `ctx`, with its worker started on first use. Schedulers and queues
// live as long as the process (a worker may still be inside a collective when exit()
// runs). Under lock().
Scheduler* scheduler_of(Context* ctx) {
    static std::map<Context*, Scheduler*>* all = new std::map<Context*, Scheduler*>;
    auto it = all->find(ctx);
    if (it != all->end()) return it->second;
    Scheduler* s = new Scheduler;
    s->legacy = new_queue(s, true, true);
    s->queues.push_back(s->legacy);
    (*all)[ctx] = s;
    std::thread(run, s).detach();
    return s;
}

bool is_default(CUstream s) {
    return s == nullptr || s == STANDIN_STREAM_LEGACY || s == STANDIN_STREAM_PER_THREAD;
}

// The queue of `stream` on `ctx` (the per-thread default stream shares the legacy
// stream's queue: more order than CUDA gives, never less). Under lock().
StreamQueue* queue_of(Context* ctx, CUstream stream) {
    if (is_default(stream) || stream->queue == nullptr) return scheduler_of(ctx)->legacy;
    return stream->queue;
}

// Waits for `marks` with state_lock released. Work a worker runs waits for nothing.
void wait_all(std::vector<Mark> marks) {
    if (is_worker) return;
    {
        std::lock_guard<std::mutex> g(lock());
        if (all_reached(marks)) return;
    }
    // The caller's lock_guard still owns state_lock; it is handed back before return.
    state_lock().unlock();
    {
        std::unique_lock<std::mutex> g(lock());
        for (const Mark& m : marks) {
            if (m.queue != nullptr) m.queue->wanted = std::max(m.queue->wanted, m.ticket);
        }
        changed().notify_all();
        changed().wait(g, [&] { return all_reached(marks); });
    }
    state_lock().lock();
}

// The points a host wait on `stream` waits for: its own work and, as if the wait were
// work issued to it, the implicit waits (under lock()).
std::vector<Mark> stream_front(Context* ctx, CUstream stream) {
    StreamQueue* q = queue_of(ctx, stream);
    std::vector<Mark> marks = implicit_waits(q);
    marks.push_back(Mark{q, q->issued});
    return marks;
}

// Queues `work` on `q` behind its implicit waits and `waits` (under lock()).
Mark enqueue(StreamQueue* q, std::function<void()> work, bool may_block, std::vector<Mark> waits) {
    for (const Mark& m : implicit_waits(q)) waits.push_back(m);
    q->issued += 1;
    q->work.push_back(Piece{std::move(work), Clock::now(), q->issued, ++serials, std::move(waits), may_block});
    changed().notify_all();
    return Mark{q, q->issued};
}

}  // namespace

bool nccl_returns_early() {
    static const bool early = [] {
        const char* mode = std::getenv("DITTO_CUDA_STANDIN_NCCL_MODE");
        return mode == nullptr || std::strcmp(mode, "blocking") != 0;
    }();
    return early;
}

StreamQueue* new_stream_queue(Context* ctx, unsigned flags) {
    std::lock_guard<std::mutex> g(lock());
    Scheduler* s = scheduler_of(ctx);
    StreamQueue* q = new_queue(s, false, (flags & 0x1) == 0);
    s->queues.push_back(q);
    return q;
}

void retire_stream_queue(StreamQueue* queue) {
    if (queue == nullptr) return;
    std::lock_guard<std::mutex> g(lock());
    queue->retired = true;
    changed().notify_all();
}

Mark enqueue_device_work(Context* ctx, CUstream stream, std::function<void()> work, bool may_block) {
    std::lock_guard<std::mutex> g(lock());
    return enqueue(queue_of(ctx, stream), std::move(work), may_block, {});
}

Mark record_mark(Context* ctx, CUstream stream) {
    std::lock_guard<std::mutex> g(lock());
    StreamQueue* q = queue_of(ctx, stream);
    if (implicit_waits(q).empty()) return Mark{q, q->issued};
    // The record waits for another stream (the legacy stream's rule): a piece of its own.
    return enqueue(q, [] {}, false, {});
}

void wait_mark_on_stream(Context* ctx, CUstream stream, Mark mark) {
    std::lock_guard<std::mutex> g(lock());
    StreamQueue* q = queue_of(ctx, stream);
    if (reached(mark) || mark.queue == q) return;
    enqueue(q, [] {}, false, {mark});
}

bool mark_reached(Mark mark) {
    std::lock_guard<std::mutex> g(lock());
    return reached(mark);
}

bool stream_idle(Context* ctx, CUstream stream) {
    std::lock_guard<std::mutex> g(lock());
    return all_reached(stream_front(ctx, stream));
}

bool on_device_worker() { return is_worker; }

void wait_mark(Mark mark) { wait_all({mark}); }

NoDrain::NoDrain() { no_drain_depth += 1; }
NoDrain::~NoDrain() { no_drain_depth -= 1; }

void drain_device_work(Context* ctx) {
    if (no_drain_depth > 0) return;
    std::vector<Mark> marks;
    {
        std::lock_guard<std::mutex> g(lock());
        for (StreamQueue* q : scheduler_of(ctx)->queues) marks.push_back(Mark{q, q->issued});
    }
    wait_all(std::move(marks));
}

CUresult synchronize_device_work(Context* ctx, const char* call) {
    drain_device_work(ctx);
    return require_live(ctx, call);
}

CUresult synchronize_stream_work(Context* ctx, CUstream stream, const char* call) {
    std::vector<Mark> marks;
    {
        std::lock_guard<std::mutex> g(lock());
        marks = stream_front(ctx, stream);
    }
    wait_all(std::move(marks));
    return require_live(ctx, call);
}

}  // namespace standin
