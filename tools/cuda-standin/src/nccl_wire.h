// The stand-in NCCL's wire: framed messages over loopback TCP between each rank and the
// clique's hub (nccl_hub.cpp), and the waits that read and write them.
//
// Why sockets: ranks live in separate processes (one per GPU, as torchrun starts them),
// so their buffers are in separate address spaces and must be copied between them. A
// socket needs no cleanup when a process dies (the kernel closes it, and the other end
// reads end-of-file), which a shared-memory segment would need (stale names, robust
// locks); and threads of one process use it unchanged.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace standin::nccl {

// ncclResult_t (NCCL 2.27's numbers, as cudarc's nccl::sys has them).
enum NcclResult : int {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
};

// Records why `call` failed (what ncclGetLastError returns on this thread), prints it
// with the stand-in's label and returns `code`.
NcclResult fail(NcclResult code, const char* call, const std::string& why);
const char* last_error();

// DITTO_CUDA_STANDIN_NCCL_TIMEOUT_S (default 600): the stand-in's safety valve. NCCL
// waits for ever for a rank that never comes; the stand-in gives up after this long, so
// that a broken test cannot hang CI for ever. Long on purpose: what a test should see
// first is ditto's own watchdog.
std::chrono::seconds safety_valve();

enum class Kind : uint32_t {
    Hello = 1,  // rank -> hub: payload Hello
    Welcome,    // hub -> rank: `peer` is an NcclResult, payload the reason when not ncclSuccess
    Post,       // rank -> hub: this rank's part of collective number `seq`
    Result,     // hub -> rank: every rank's part of collective `seq`, each as u64 length + bytes
    Send,       // rank -> hub: bytes for rank `peer`
    Deliver,    // hub -> rank: bytes from rank `peer`
    Bye,        // rank -> hub: ncclCommDestroy, a clean leave
    Gone,       // hub -> rank: rank `peer`'s connection ended without a Bye
};

struct Header {
    uint32_t kind;
    int32_t peer;
    uint64_t seq;
    uint64_t length;
};

// What a rank says first. `magic` and `key` come from the unique id: a connection that
// cannot repeat them (a port scanner, a health check) is closed without taking a slot.
struct Hello {
    char magic[16];
    uint64_t key;
    int32_t nranks;
    int32_t rank;
    int32_t device;
    int32_t pid;
};

// The unique id's layout: magic, key, the hub's port and process id, and its IPv4
// address (network byte order; loopback unless NCCL_SOCKET_IFNAME picks an interface,
// nccl_iface.h), as NCCL's id carries rank 0's bootstrap address.
constexpr char kMagic[16] = "ditto-standin-n";
struct IdBody {
    char magic[16];
    uint64_t key;
    uint16_t port;
    int32_t pid;
    uint32_t address;
};

// No frame's payload may exceed this: a collective's buffer is device memory, which the
// stand-in caps far below it (DITTO_CUDA_STANDIN_MEMORY_MB). Checked before allocating.
constexpr uint64_t kMaxPayload = uint64_t(1) << 34;

enum class Io { Ok, Closed, Aborted, TimedOut, Invalid };

using Clock = std::chrono::steady_clock;

// How long a read or write may wait: until `deadline`, or until `wake_fd` (an eventfd,
// -1 for none) becomes readable, which is how ncclCommAbort releases a blocked rank.
struct Waiter {
    int wake_fd = -1;
    Clock::time_point deadline = Clock::time_point::max();
};

Io write_frame(int fd, Kind kind, int32_t peer, uint64_t seq, const void* data, size_t length,
               const Waiter& wait);
// The same frame with its payload in two parts (a header of the payload, then bytes).
Io write_frame2(int fd, Kind kind, int32_t peer, uint64_t seq, const void* a, size_t a_length,
                const void* b, size_t b_length, const Waiter& wait);
// Reads one frame; a payload longer than `max_payload` (or one that cannot be
// allocated) is Io::Invalid, checked before allocating.
Io read_frame(int fd, Header* header, std::vector<char>* payload, uint64_t max_payload, const Waiter& wait);

// Blocks until `wait.wake_fd` fires (Io::Aborted) or the deadline (Io::TimedOut): what a
// rank does when its peers are gone, since NCCL would block too.
Io block(const Waiter& wait);

}  // namespace standin::nccl
