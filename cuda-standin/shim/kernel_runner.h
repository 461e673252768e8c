// Running a `__global__` function's host build: the template that unpacks cuLaunchKernel's
// `kernelParams` by the kernel's own C++ signature and runs every thread of the grid.
//
// `STANDIN_REGISTER_KERNEL(name, source)` (written by scripts/cuda_standin.sh after each
// `.cu`, for every `__global__` found in it) instantiates KernelRunner for `&name`: the
// parameter types come from the function's type, so unpacking `kernelParams` can never
// drift from the kernel's signature. The PTX's own parameter list (sizes, alignments) is
// checked against the same types when a module is loaded.
#pragma once

#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_host_shim.h"
#include "host_kernel.h"

namespace standin {
template <auto Kernel>
struct KernelRunner;

template <typename... Args, void (*Kernel)(Args...)>
struct KernelRunner<Kernel> {
    static std::vector<ParamInfo> params() {
        return {ParamInfo{sizeof(Args), alignof(Args), std::is_pointer<Args>::value}...};
    }

    static void run(void** params, Dim3 grid, Dim3 block) {
        run_with(params, grid, block, std::index_sequence_for<Args...>{});
    }

  private:
    // Each argument is copied out of the caller's buffer once (it may be unaligned), then
    // every thread of every block calls the kernel with the same values, in order.
    template <size_t... I>
    static void run_with(void** params, Dim3 grid, Dim3 block, std::index_sequence<I...>) {
        std::tuple<std::remove_cv_t<Args>...> values;
        (std::memcpy(static_cast<void*>(&std::get<I>(values)), params[I], sizeof(Args)), ...);
        (void)params;
        gridDim = dim3(grid.x, grid.y, grid.z);
        blockDim = dim3(block.x, block.y, block.z);
        for (unsigned bz = 0; bz < grid.z; ++bz)
            for (unsigned by = 0; by < grid.y; ++by)
                for (unsigned bx = 0; bx < grid.x; ++bx) {
                    blockIdx = uint3{bx, by, bz};
                    for (unsigned tz = 0; tz < block.z; ++tz)
                        for (unsigned ty = 0; ty < block.y; ++ty)
                            for (unsigned tx = 0; tx < block.x; ++tx) {
                                threadIdx = uint3{tx, ty, tz};
                                Kernel(std::get<I>(values)...);
                            }
                }
    }
};

template <auto Kernel>
struct Registration {
    Registration(const char* name, const char* source) {
        register_kernel(HostKernel{name, source, &KernelRunner<Kernel>::run, KernelRunner<Kernel>::params()});
    }
};

}  // namespace standin

#define STANDIN_REGISTER_KERNEL(name, source) \
    static const ::standin::Registration<&name> standin_registration_##name{#name, source};
