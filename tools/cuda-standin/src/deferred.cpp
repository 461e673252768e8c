// The deferred mode's switches and its queueing of stream work (deferred.h).
#include "deferred.h"

#include <cinttypes>
#include <cstdlib>
#include <cstring>

#include "device_queue.h"
#include "errors.h"
#include "fault_trap.h"
#include "memory.h"

namespace standin {
namespace {

struct ModeConfig {
    bool deferred = false;
    std::string error;
};

const ModeConfig& mode_config() {
    static const ModeConfig config = [] {
        ModeConfig c;
        const char* mode = std::getenv("DITTO_CUDA_STANDIN_MODE");
        if (mode == nullptr || *mode == '\0' || std::strcmp(mode, "eager") == 0) return c;
        if (std::strcmp(mode, "deferred") == 0) {
            c.deferred = true;
            return c;
        }
        c.error = std::string("DITTO_CUDA_STANDIN_MODE=") + mode + " names no mode; expected eager or deferred";
        return c;
    }();
    return config;
}

// The sentence a fault of deferred work leaves as the context's sticky error.
std::string fault_reason(const std::string& what, const Fault& fault) {
    char text[600];
    if (fault.signal == 8) {
        std::snprintf(text, sizeof text, "%s (queued by the deferred mode) divided an integer by zero (SIGFPE)",
                      what.c_str());
    } else {
        std::snprintf(text, sizeof text, "%s (queued by the deferred mode) stopped with signal %d: it touched %s",
                      what.c_str(), fault.signal, describe_address(fault.address).c_str());
    }
    return text;
}

}  // namespace

bool deferred_mode() { return mode_config().deferred; }

const std::string& mode_config_error() { return mode_config().error; }

long defer_ms() {
    static const long ms = [] {
        const char* text = std::getenv("DITTO_CUDA_STANDIN_DEFER_MS");
        if (text == nullptr || *text == '\0') return 20L;
        char* end = nullptr;
        const long value = std::strtol(text, &end, 10);
        return (end != nullptr && *end == '\0' && value >= 0) ? value : 20L;
    }();
    return ms;
}

bool defer_stream_work() { return deferred_mode() && !on_device_worker(); }

void defer(Context* ctx, CUstream stream, std::string what, std::function<void()> work) {
    enqueue_device_work(ctx, stream, [ctx, what = std::move(what), work = std::move(work)] {
        const Fault fault = trapped([&] { work(); });
        if (fault.signal == 0) return;
        const std::string reason = fault_reason(what, fault);
        say("%s", reason.c_str());
        // SIGFPE (an integer division by zero) is a launch failure, as in launch.cpp.
        const CUresult code = fault.signal == 8 ? CUDA_ERROR_LAUNCH_FAILED : CUDA_ERROR_ILLEGAL_ADDRESS;
        std::lock_guard<std::mutex> guard(state_lock());
        poison(ctx, code, reason);
    });
}

}  // namespace standin
