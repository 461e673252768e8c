// DITTO_CUDA_STANDIN_STATS=<path>: at process exit, write how often each driver, cuBLAS
// and NCCL entry point was called, as one JSON object {"cuLaunchKernel": 51, ...}. Each
// `%p` in the path becomes the process id (as in LLVM's LLVM_PROFILE_FILE), so the ranks
// of a many-process job, which share one environment, write one file each.
//
// Why: the host work a training step costs on a GPU is mostly driver calls (allocations,
// memsets, launches, copies, synchronisations), and their counts are the same on the
// stand-in as on a GPU. Tests hold a per-step budget on them (tests/integration/gpu_step_budget.rs).
//
// The counting happens in one place, generated at build time (tools/cuda-standin/generate.py
// `counters`): each exported name is a trampoline that adds one to its counter and jumps
// to the implementation. Only calls from outside the library count; entry points never
// called are left out of the object.
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include <unistd.h>

#include "errors.h"
#include "upload_sources.h"

extern "C" {
__attribute__((visibility("hidden"))) extern unsigned long long standin_call_counts[];
__attribute__((visibility("hidden"))) extern const char* const standin_call_names[];
__attribute__((visibility("hidden"))) extern const std::size_t standin_call_name_count;
}

namespace {

// `pattern` with every `%p` replaced by this process's id.
std::string expand_pid(const char* pattern) {
    std::string path;
    for (const char* c = pattern; *c != '\0'; ++c) {
        if (c[0] == '%' && c[1] == 'p') {
            path += std::to_string(getpid());
            ++c;
        } else {
            path += *c;
        }
    }
    return path;
}

void write_call_stats() {
    const char* pattern = std::getenv("DITTO_CUDA_STANDIN_STATS");
    if (pattern == nullptr || pattern[0] == '\0') return;
    const std::string expanded = expand_pid(pattern);
    const char* path = expanded.c_str();
    std::FILE* out = std::fopen(path, "w");
    if (out == nullptr) {
        standin::say("DITTO_CUDA_STANDIN_STATS: cannot write %s: %s", path, std::strerror(errno));
        return;
    }
    std::fputs("{", out);
    bool first = true;
    for (std::size_t i = 0; i < standin_call_name_count; ++i) {
        unsigned long long count = __atomic_load_n(&standin_call_counts[i], __ATOMIC_RELAXED);
        if (count == 0) continue;
        std::fprintf(out, "%s\n  \"%s\": %llu", first ? "" : ",", standin_call_names[i], count);
        first = false;
    }
    // Not entry points: how many host-to-device copies read pinned and pageable memory
    // (upload_sources.h).
    const standin::UploadCounts uploads = standin::upload_counts();
    const std::pair<const char*, unsigned long long> sources[] = {
        {"htod_from_pinned", uploads.pinned}, {"htod_from_pageable", uploads.pageable}};
    for (const auto& [name, count] : sources) {
        if (count == 0) continue;
        std::fprintf(out, "%s\n  \"%s\": %llu", first ? "" : ",", name, count);
        first = false;
    }
    std::fputs(first ? "}\n" : "\n}\n", out);
    if (std::fclose(out) != 0) {
        standin::say("DITTO_CUDA_STANDIN_STATS: writing %s failed: %s", path, std::strerror(errno));
    }
}

// Registered when the library loads (cudarc opens it at the first CUDA call), so it runs
// at exit(), counting every call made until then.
__attribute__((constructor)) void register_call_stats() { std::atexit(write_call_stats); }

}  // namespace
