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

// A kernel that calls __syncthreads: the same unpacking, but each block's threads run as
// fibers (block_fibers.h), so every thread reaches a barrier before any passes it.
template <auto Kernel>
struct BlockKernelRunner;

template <typename... Args, void (*Kernel)(Args...)>
struct BlockKernelRunner<Kernel> {
    static void run(void** params, Dim3 grid, Dim3 block) {
        std::tuple<std::remove_cv_t<Args>...> values;
        copy_params(params, values, std::index_sequence_for<Args...>{});
        gridDim = dim3(grid.x, grid.y, grid.z);
        blockDim = dim3(block.x, block.y, block.z);
        run_grid_as_fibers(grid, block, &one_thread, &values);
    }

  private:
    template <size_t... I>
    static void copy_params(void** params, std::tuple<std::remove_cv_t<Args>...>& values,
                            std::index_sequence<I...>) {
        (std::memcpy(static_cast<void*>(&std::get<I>(values)), params[I], sizeof(Args)), ...);
        (void)params;
    }

    static void one_thread(void* arg) {
        auto& values = *static_cast<std::tuple<std::remove_cv_t<Args>...>*>(arg);
        std::apply([](auto&... v) { Kernel(v...); }, values);
    }
};

template <auto Kernel, template <auto> class Runner = KernelRunner>
struct Registration {
    Registration(const char* name, const char* source) {
        register_kernel(HostKernel{name, source, &Runner<Kernel>::run, KernelRunner<Kernel>::params()});
    }
};

}  // namespace standin

#define STANDIN_REGISTER_KERNEL(name, source) \
    static const ::standin::Registration<&name> standin_registration_##name{#name, source};
// For kernels that call __syncthreads (generate.py picks it): blocks run as fibers.
#define STANDIN_REGISTER_BLOCK_KERNEL(name, source)                                               \
    static const ::standin::Registration<&name, ::standin::BlockKernelRunner> standin_registration_##name{ \
        #name, source};
