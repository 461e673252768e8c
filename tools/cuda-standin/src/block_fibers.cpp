// The fiber scheduler behind __syncthreads (see shim/block_fibers.h).
//
// Fibers switch with a few instructions of x86-64 assembly (save the callee-saved
// registers, the SSE and x87 control words and the stack pointer; load another's):
// ucontext's swapcontext makes a system call per switch (the signal mask), and a tiled
// matmul switches hundreds of thousands of times per launch. Each fiber has its own
// 64 KiB stack (enough for a kernel's locals and the fault handler), mapped once per
// host thread and reused by every launch.
#include <signal.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "block_fibers.h"
#include "cuda_host_shim.h"
#include "fault_trap.h"

#if !defined(__x86_64__)
#error "the stand-in's fiber switch (block_fibers.cpp) is written for x86-64"
#endif

extern "C" void standin_fiber_switch(void** save_sp, void* load_sp);

// standin_fiber_switch(save, load): pushes the callee-saved registers and the control
// words, stores the stack pointer in *save, switches to `load` and pops what it holds.
asm(R"(
    .text
    .p2align 4
    .globl standin_fiber_switch
    .hidden standin_fiber_switch
    .type standin_fiber_switch,@function
standin_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size standin_fiber_switch, .-standin_fiber_switch
)");

namespace standin {
namespace {

constexpr size_t kStackBytes = 64 * 1024;

struct Fiber {
    void* sp = nullptr;
    bool done = false;
    uint3 index{0, 0, 0};
};

struct BlockRun {
    void* scheduler_sp = nullptr;
    std::vector<Fiber> fibers;
    size_t current = 0;
    ThreadBody run = nullptr;
    void* arg = nullptr;
};

thread_local BlockRun* active = nullptr;
// This host thread's fiber stacks (one region, kStackBytes each), kept between launches.
thread_local char* stacks = nullptr;
thread_local size_t stack_count = 0;

char* stack_region(size_t count) {
    if (count <= stack_count) return stacks;
    if (stacks != nullptr) munmap(stacks, stack_count * kStackBytes);
    void* p = mmap(nullptr, count * kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        std::fprintf(stderr, "CUDA stand-in: cannot map %zu fiber stacks for a block\n", count);
        std::abort();
    }
    stacks = static_cast<char*>(p);
    stack_count = count;
    return stacks;
}

// Where every fiber starts (reached by the switch's `ret`): runs its thread, marks it
// done and switches back for good.
extern "C" [[noreturn]] void standin_fiber_entry() {
    BlockRun* run = active;
    Fiber& fiber = run->fibers[run->current];
    run->run(run->arg);
    fiber.done = true;
    void* unused = nullptr;
    standin_fiber_switch(&unused, run->scheduler_sp);
    std::abort();  // a finished fiber is never resumed
}

// A fresh stack whose first switch "returns" into standin_fiber_entry with the current
// control words: [mxcsr, fpu cw][r15 r14 r13 r12 rbx rbp][entry][0], the entry's slot
// 16-byte aligned so the entry starts with the ABI's alignment.
void* initial_stack(char* base) {
    uintptr_t top = reinterpret_cast<uintptr_t>(base + kStackBytes) & ~uintptr_t{15};
    uintptr_t* slot = reinterpret_cast<uintptr_t*>(top - 16);  // entry address, aligned
    slot[0] = reinterpret_cast<uintptr_t>(&standin_fiber_entry);
    slot[1] = 0;
    uintptr_t* regs = slot - 6;
    for (int i = 0; i < 6; ++i) regs[i] = 0;
    uint32_t* control = reinterpret_cast<uint32_t*>(regs - 1);
    asm volatile("stmxcsr %0" : "=m"(control[0]));
    asm volatile("fnstcw %0" : "=m"(*reinterpret_cast<uint16_t*>(&control[1])));
    return control;
}

}  // namespace

// Raises `fault` again on this thread, so that an enclosing trap reports it: touching
// the address that faulted (guard pages and freed memory stay inaccessible), or an
// integer division by zero; raise() if the address has become readable meanwhile.
static void raise_again(const Fault& fault) {
    if (fault.signal == SIGFPE) {
        int zero = 0, one = 1;
        asm volatile("cltd\n\tidivl %1" : "+a"(one) : "r"(zero) : "edx", "cc");
    } else {
        (void)*reinterpret_cast<volatile const char*>(fault.address);
    }
    raise(fault.signal);
}

namespace {
void run_block_as_fibers(Dim3 block, ThreadBody body, void* arg) {
    const size_t count = size_t{block.x} * block.y * block.z;
    BlockRun run;
    run.run = body;
    run.arg = arg;
    run.fibers.resize(count);
    char* region = stack_region(count);
    size_t i = 0;
    for (unsigned z = 0; z < block.z; ++z)
        for (unsigned y = 0; y < block.y; ++y)
            for (unsigned x = 0; x < block.x; ++x, ++i) {
                run.fibers[i].index = uint3{x, y, z};
                run.fibers[i].sp = initial_stack(region + i * kStackBytes);
            }
    active = &run;
    // Rounds alternate their order: threads ascending, then descending, and so on. With
    // one order only, thread 0 would always run first between two barriers, so a kernel
    // whose thread 0 reads what the others write next (a missing __syncthreads) would
    // still read the right values; in the other direction it reads them overwritten, as
    // a GPU's warps may. A correct kernel gives the same results in any order.
    bool descending = false;
    for (size_t unfinished = count; unfinished > 0; descending = !descending) {
        unfinished = 0;
        for (size_t step = 0; step < count; ++step) {
            const size_t f = descending ? count - 1 - step : step;
            if (run.fibers[f].done) continue;
            run.current = f;
            threadIdx = run.fibers[f].index;
            standin_fiber_switch(&run.scheduler_sp, run.fibers[f].sp);
            if (!run.fibers[f].done) ++unfinished;
        }
    }
    active = nullptr;
}
}  // namespace

void run_grid_as_fibers(Dim3 grid, Dim3 block, ThreadBody body, void* arg) {
    static std::mutex lock;
    Fault fault;
    {
        std::lock_guard<std::mutex> guard(lock);
        fault = trapped([&] {
            for (unsigned bz = 0; bz < grid.z; ++bz)
                for (unsigned by = 0; by < grid.y; ++by)
                    for (unsigned bx = 0; bx < grid.x; ++bx) {
                        blockIdx = uint3{bx, by, bz};
                        run_block_as_fibers(block, body, arg);
                    }
        });
        active = nullptr;  // a fault leaves the block's run behind
    }
    if (fault.signal != 0) raise_again(fault);
}

void block_barrier() {
    BlockRun* run = active;
    if (run == nullptr) {
        std::fprintf(stderr,
                     "CUDA stand-in: __syncthreads() in a kernel registered without block fibers "
                     "(rebuild the stand-in: scripts/cuda_standin.sh)\n");
        std::abort();
    }
    Fiber& fiber = run->fibers[run->current];
    standin_fiber_switch(&fiber.sp, run->scheduler_sp);
    // Resumed by the scheduler, which set threadIdx to this fiber's index.
}

}  // namespace standin
