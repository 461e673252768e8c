// Device work that completes after its call returns (device_queue.h): one worker thread
// per context runs it in queue order, as a GPU runs a stream; in the deferred mode it
// holds each piece until a host thread waits or the piece is DITTO_CUDA_STANDIN_DEFER_MS
// old (deferred.h).
#include "device_queue.h"

#include <condition_variable>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "deferred.h"

namespace standin {
namespace {

using Clock = std::chrono::steady_clock;

struct Queued {
    std::function<void()> work;
    Clock::time_point issued_at;
};

struct Queue {
    std::mutex lock;
    std::condition_variable changed;
    std::deque<Queued> work;
    int waiters = 0;  // host threads in wait_device_work
    uint64_t issued = 0;
    uint64_t done = 0;
};

thread_local int no_drain_depth = 0;
thread_local bool is_worker = false;

void run(Queue* q) {
    is_worker = true;
    const bool hold = deferred_mode();
    const auto patience = std::chrono::milliseconds(defer_ms());
    std::unique_lock<std::mutex> g(q->lock);
    for (;;) {
        q->changed.wait(g, [&] { return !q->work.empty(); });
        // Deferred: the front runs once someone waits for the queue or it is old enough.
        while (hold && q->waiters == 0 && Clock::now() < q->work.front().issued_at + patience) {
            q->changed.wait_until(g, q->work.front().issued_at + patience);
        }
        std::function<void()> next = std::move(q->work.front().work);
        q->work.pop_front();
        g.unlock();
        next();
        g.lock();
        q->done += 1;
        q->changed.notify_all();
    }
}

// The queue of `ctx`, with its worker started on first use. Queues live as long as the
// process (a worker may still be inside a collective when exit() runs).
Queue* queue_of(Context* ctx, bool create) {
    static std::mutex lock;
    static std::map<Context*, Queue*>* queues = new std::map<Context*, Queue*>;
    std::lock_guard<std::mutex> g(lock);
    auto it = queues->find(ctx);
    if (it != queues->end()) return it->second;
    if (!create) return nullptr;
    Queue* q = new Queue;
    (*queues)[ctx] = q;
    std::thread(run, q).detach();
    return q;
}

}  // namespace

bool nccl_returns_early() {
    static const bool early = [] {
        const char* mode = std::getenv("DITTO_CUDA_STANDIN_NCCL_MODE");
        return mode == nullptr || std::strcmp(mode, "blocking") != 0;
    }();
    return early;
}

uint64_t enqueue_device_work(Context* ctx, std::function<void()> work) {
    Queue* q = queue_of(ctx, true);
    std::lock_guard<std::mutex> g(q->lock);
    q->work.push_back(Queued{std::move(work), Clock::now()});
    q->issued += 1;
    q->changed.notify_all();
    return q->issued;
}

uint64_t device_work_issued(Context* ctx) {
    Queue* q = queue_of(ctx, false);
    if (q == nullptr) return 0;
    std::lock_guard<std::mutex> g(q->lock);
    return q->issued;
}

bool device_work_done(Context* ctx, uint64_t ticket) {
    Queue* q = queue_of(ctx, false);
    if (q == nullptr) return true;
    std::lock_guard<std::mutex> g(q->lock);
    return q->done >= ticket;
}

void wait_device_work(Context* ctx, uint64_t ticket) {
    Queue* q = queue_of(ctx, false);
    // The worker runs its queue in order: work it runs waits for nothing queued after it.
    if (q == nullptr || is_worker || device_work_done(ctx, ticket)) return;
    // The caller's lock_guard still owns state_lock; it is handed back before return.
    state_lock().unlock();
    {
        std::unique_lock<std::mutex> g(q->lock);
        q->waiters += 1;
        q->changed.notify_all();
        q->changed.wait(g, [&] { return q->done >= ticket; });
        q->waiters -= 1;
    }
    state_lock().lock();
}

bool on_device_worker() { return is_worker; }

NoDrain::NoDrain() { no_drain_depth += 1; }
NoDrain::~NoDrain() { no_drain_depth -= 1; }

void drain_device_work(Context* ctx) {
    if (no_drain_depth > 0) return;
    wait_device_work(ctx, device_work_issued(ctx));
}

CUresult synchronize_device_work(Context* ctx, const char* call) {
    drain_device_work(ctx);
    return require_live(ctx, call);
}

}  // namespace standin
