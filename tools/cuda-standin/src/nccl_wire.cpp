// Framed messages over a socket, each wait bounded by a deadline and an abort wake-up.
// Every read and write is non-blocking behind poll(), so a rank blocked on its peers
// wakes for ncclCommAbort at once. Writes use MSG_NOSIGNAL: a peer that died makes
// the write fail (Io::Closed) instead of raising SIGPIPE in the writer's process.
#include "nccl_wire.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "errors.h"

namespace standin::nccl {

namespace {

thread_local std::string last_message;

// Milliseconds poll() may wait before `deadline` (-1: for ever).
int poll_timeout(Clock::time_point deadline) {
    if (deadline == Clock::time_point::max()) return -1;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return 0;
    return left > 1000 * 1000 ? 1000 * 1000 : int(left);
}

// Waits until `fd` is ready for `events`; Io::Ok, or why not.
Io wait_ready(int fd, short events, const Waiter& wait) {
    for (;;) {
        pollfd fds[2] = {{fd, events, 0}, {wait.wake_fd, POLLIN, 0}};
        const int n = poll(fds, wait.wake_fd >= 0 ? 2 : 1, poll_timeout(wait.deadline));
        if (n < 0) {
            if (errno == EINTR) continue;
            return Io::Closed;
        }
        if (wait.wake_fd >= 0 && (fds[1].revents & POLLIN)) return Io::Aborted;
        if (fds[0].revents != 0) return Io::Ok;  // ready, or an error the next call reports
        if (n == 0 && Clock::now() >= wait.deadline) return Io::TimedOut;
    }
}

Io write_exact(int fd, const char* data, size_t length, const Waiter& wait) {
    while (length > 0) {
        if (Io r = wait_ready(fd, POLLOUT, wait); r != Io::Ok) return r;
        const ssize_t n = send(fd, data, length, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            return Io::Closed;
        }
        data += n;
        length -= size_t(n);
    }
    return Io::Ok;
}

Io read_exact(int fd, char* data, size_t length, const Waiter& wait) {
    while (length > 0) {
        if (Io r = wait_ready(fd, POLLIN, wait); r != Io::Ok) return r;
        const ssize_t n = recv(fd, data, length, MSG_DONTWAIT);
        if (n == 0) return Io::Closed;
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            return Io::Closed;
        }
        data += n;
        length -= size_t(n);
    }
    return Io::Ok;
}

}  // namespace

NcclResult fail(NcclResult code, const char* call, const std::string& why) {
    last_message = std::string(call) + ": " + why;
    standin::say("%s", last_message.c_str());
    return code;
}

const char* last_error() { return last_message.c_str(); }

std::chrono::seconds safety_valve() {
    const char* s = std::getenv("DITTO_CUDA_STANDIN_NCCL_TIMEOUT_S");
    const long v = s ? std::atol(s) : 0;
    return std::chrono::seconds(v > 0 ? v : 600);
}

Io write_frame(int fd, Kind kind, int32_t peer, uint64_t seq, const void* data, size_t length,
               const Waiter& wait) {
    return write_frame2(fd, kind, peer, seq, data, length, nullptr, 0, wait);
}

Io write_frame2(int fd, Kind kind, int32_t peer, uint64_t seq, const void* a, size_t a_length,
                const void* b, size_t b_length, const Waiter& wait) {
    const Header h{uint32_t(kind), peer, seq, uint64_t(a_length + b_length)};
    if (Io r = write_exact(fd, reinterpret_cast<const char*>(&h), sizeof h, wait); r != Io::Ok) return r;
    if (Io r = write_exact(fd, static_cast<const char*>(a), a_length, wait); r != Io::Ok) return r;
    return write_exact(fd, static_cast<const char*>(b), b_length, wait);
}

Io read_frame(int fd, Header* header, std::vector<char>* payload, uint64_t max_payload, const Waiter& wait) {
    if (Io r = read_exact(fd, reinterpret_cast<char*>(header), sizeof *header, wait); r != Io::Ok) return r;
    if (header->length > max_payload) return Io::Invalid;
    try {
        payload->resize(size_t(header->length));
    } catch (const std::bad_alloc&) {
        return Io::Invalid;
    }
    return read_exact(fd, payload->data(), payload->size(), wait);
}

Io block(const Waiter& wait) {
    for (;;) {
        pollfd fds[1] = {{wait.wake_fd, POLLIN, 0}};
        const int n = poll(fds, wait.wake_fd >= 0 ? 1 : 0, poll_timeout(wait.deadline));
        if (n < 0 && errno == EINTR) continue;
        if (n > 0) return Io::Aborted;
        if (Clock::now() >= wait.deadline) return Io::TimedOut;
    }
}

}  // namespace standin::nccl
