// What a `.cu` file needs from CUDA to compile as host C++ for the stand-in.
//
// scripts/cuda_standin.sh compiles every kernel source with this header forced in first
// (-include), unchanged, as C++17 with -ffp-contract=off (docs/contract.md §11: no fused
// multiply-add on either side). `__global__` means nothing; the built-in variables are
// per host thread, set by the stand-in's launcher before each simulated GPU thread runs,
// one thread at a time, except in kernels that call `__syncthreads()`, whose blocks run
// their threads as fibers (block_fibers.h); `__shared__` variables are static (one launch of such a kernel at a time).
// `__CUDA_ARCH__` stays undefined: ditto's headers then take their host code paths, which
// the parity tests check against the device paths' results.
#pragma once

#ifndef __global__
#define __global__
#endif

struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};

// Defined once in the stand-in library (builtins.cpp). Initial-exec TLS: one load off the
// thread pointer, cheap enough to read in every simulated thread.
#define STANDIN_TLS __attribute__((tls_model("initial-exec"))) thread_local
extern STANDIN_TLS uint3 blockIdx;
extern STANDIN_TLS uint3 threadIdx;
extern STANDIN_TLS dim3 blockDim;
extern STANDIN_TLS dim3 gridDim;

constexpr int warpSize = 32;

// Shared memory and the block barrier (block_fibers.h): one copy, which every fiber of
// the running block sees (such kernels run one launch at a time).
#include "block_fibers.h"
// expf / logf rounded like a GPU's, not like the host's libm (device_math.h).
#include "device_math.h"
#define __shared__ static
#define __syncthreads() ::standin::block_barrier()

// Atomics: simulated threads run one after another, so a plain read-modify-write is
// atomic. They return the old value, as CUDA's do.
#define STANDIN_ATOMIC_ADD(T)                        \
    inline T atomicAdd(T* address, T value) {        \
        const T old = *address;                      \
        *address = old + value;                      \
        return old;                                  \
    }
STANDIN_ATOMIC_ADD(int)
STANDIN_ATOMIC_ADD(unsigned int)
STANDIN_ATOMIC_ADD(unsigned long long)
STANDIN_ATOMIC_ADD(float)
STANDIN_ATOMIC_ADD(double)
#undef STANDIN_ATOMIC_ADD

template <typename T>
inline T atomicExch(T* address, T value) {
    const T old = *address;
    *address = value;
    return old;
}

template <typename T>
inline T atomicCAS(T* address, T compare, T value) {
    const T old = *address;
    if (old == compare) *address = value;
    return old;
}

template <typename T>
inline T atomicMax(T* address, T value) {
    const T old = *address;
    if (value > old) *address = value;
    return old;
}

template <typename T>
inline T atomicMin(T* address, T value) {
    const T old = *address;
    if (value < old) *address = value;
    return old;
}

// Memory fences order nothing when threads run one at a time.
inline void __threadfence() {}

// A read-only cached load is a load.
template <typename T>
inline T __ldg(const T* p) {
    return *p;
}
