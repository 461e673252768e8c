// Blocks whose threads synchronise: `__shared__` memory and `__syncthreads()` on the host.
//
// A kernel that calls __syncthreads cannot run its threads one after another to the end:
// every thread of the block must reach the barrier before any goes past it. For such
// kernels (scripts/cuda_standin.sh registers them with STANDIN_REGISTER_BLOCK_KERNEL,
// chosen by generate.py when the unit calls the barrier) each simulated thread of a block
// runs as a fiber on the launching host thread: the block runs in rounds; in a round every
// unfinished fiber runs until it reaches the barrier or returns; the next round starts
// when all have. `__shared__` variables are `static`: one copy in the process, which all
// fibers of the block share, as a block shares its shared memory; so such kernels run one
// launch at a time in the process (a lock; thread_local copies would not fit the static
// TLS block a dlopen'ed library gets). Kernels without the barrier keep the plain loop
// (kernel_runner.h).
// Implementation: tools/cuda-standin/src/block_fibers.cpp.
#pragma once

#include "host_kernel.h"

namespace standin {

// The body of one simulated thread: `run(arg)` with threadIdx already set.
using ThreadBody = void (*)(void* arg);

// Runs every block of the grid, each block's threads as fibers, as above, holding the
// process's block-kernel lock. A fault in the kernel is caught inside the lock, the lock
// released, and the fault raised again on the caller's thread (the launch's own trap
// reports it, as for any kernel).
void run_grid_as_fibers(Dim3 grid, Dim3 block, ThreadBody run, void* arg);

// __syncthreads(): hands control back to the block's scheduler until every thread of the
// block has arrived. Outside a fiber block (a kernel registered without the barrier), it
// aborts with a message: the build would have run its threads without synchronising.
void block_barrier();

}  // namespace standin
