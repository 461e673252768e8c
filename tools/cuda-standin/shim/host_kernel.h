// A kernel's host build, as the stand-in's registry holds it (see kernel_runner.h for
// how one is made from a kernel's C++ signature).
#pragma once

#include <cstddef>
#include <vector>

namespace standin {

struct ParamInfo {
    size_t size;
    size_t align;
    bool pointer;  // validated against live device allocations at launch
};

struct Dim3 {
    unsigned x, y, z;
};

// Runs every thread of a grid: `params` is cuLaunchKernel's kernelParams.
using KernelRun = void (*)(void** params, Dim3 grid, Dim3 block);

struct HostKernel {
    const char* name;
    const char* source;  // the .cu it came from, for messages
    KernelRun run;
    std::vector<ParamInfo> params;
};

void register_kernel(const HostKernel& kernel);

}  // namespace standin
