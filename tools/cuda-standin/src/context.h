// Devices, primary contexts, streams and events: the objects every other call names.
//
// One process-wide lock guards this state (`state_lock`); kernels and copies run on the
// calling thread without it, so several host threads run work at once, as on a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "api.h"

namespace standin {

// One simulated GPU, from DITTO_CUDA_STANDIN_DEVICES (see devices.cpp).
struct DeviceInfo {
    int ordinal;   // as this process numbers it (after CUDA_VISIBLE_DEVICES)
    int physical;  // among all the stand-in's devices: the same GPU in every process
    int sm_count;
    int cc_major;
    int cc_minor;
    bool memory_pools;  // CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
    size_t total_memory;
    std::string name;
};

// Parsed once; empty (and `device_config_error` set) when the variable is malformed.
const std::vector<DeviceInfo>& devices();
// The physical index of visible device `ordinal` (itself when out of range).
int physical_device(int ordinal);
const std::string& device_config_error();
// The CUDA version the simulated driver supports (DITTO_CUDA_STANDIN_DRIVER_VERSION).
int driver_version();

// A device's primary context: the only kind the stand-in creates.
struct Context {
    int device = 0;
    int refcount = 0;
    // Bumped whenever the context is destroyed (refcount back to 0), so handles made
    // before then (streams, events, modules) are recognised as dead.
    unsigned generation = 1;
    // A fault makes a context unusable, as on a GPU: every later call on it returns the
    // code it failed with. `sticky_reason` says where that came from.
    CUresult sticky = CUDA_SUCCESS;
    std::string sticky_reason;
};

struct Capture;      // graphs.h
struct StreamQueue;  // device_queue.h

// A point in one stream's queue (device_queue.h): reached once the work with `ticket`
// on `queue` (and everything before it there) ran. A null queue is always reached.
struct Mark {
    StreamQueue* queue = nullptr;
    uint64_t ticket = 0;
};

struct Stream {
    Context* ctx;
    unsigned generation;
    unsigned flags;
    // The stream's own queue of device work (device_queue.h); it outlives the stream,
    // as work queued before cuStreamDestroy still runs.
    StreamQueue* queue = nullptr;
    // Set between cuStreamBeginCapture and cuStreamEndCapture: work issued to the stream
    // is recorded into a graph instead of run (graphs.cpp).
    Capture* capture = nullptr;
};

struct Event {
    Context* ctx;
    unsigned generation;
    unsigned flags;
    bool recorded = false;
    // The device work queued before the record (device_queue.h): complete once it ran.
    Mark mark;
};

std::mutex& state_lock();

// CUDA_ERROR_NOT_INITIALIZED unless cuInit succeeded.
CUresult require_init(const char* call);
// CUDA_ERROR_INVALID_DEVICE unless `device` exists (after require_init).
CUresult require_device(CUdevice device, const char* call);

// The calling thread's current context, or nullptr.
Context* current_context();
// The current context, live and without a sticky error; INVALID_CONTEXT without one.
// Call with state_lock held.
CUresult require_current(const char* call, Context** out);
// `ctx` is live (retained) and has no sticky error. Call with state_lock held.
CUresult require_live(Context* ctx, const char* call);

// The context a stream handle belongs to (0, 0x1 and 0x2 name the current context's
// default stream). Checks that it is live and, with `current_only`, that it is the
// current context; then waits for the context's queued device work (device_queue.h),
// unless a NoDrain is active. Call with state_lock held.
CUresult resolve_stream(CUstream stream, const char* call, bool current_only, Context** out);

// Makes every later call on `ctx` fail with `code` (a kernel touched memory it must not).
void poison(Context* ctx, CUresult code, const std::string& reason);

// The primary context of `device` (created on first use, never freed).
Context* primary_context(int device);

}  // namespace standin
