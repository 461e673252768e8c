// Turning a fault in host-executed device code into a CUDA error instead of a crash.
//
// While `run_trapped` runs its body, a SIGSEGV, SIGBUS or SIGFPE on the calling thread
// jumps back out of it (siglongjmp to a thread-local sigjmp_buf) and is reported as the
// signal and the faulting address. Outside a trapped body the previous handlers (Rust's
// stack-overflow handler, or the default action) see every signal as before.
#pragma once

#include <cstdint>

namespace standin {

struct Fault {
    int signal = 0;        // 0 when the body finished
    uintptr_t address = 0; // the faulting address (si_addr)
};

// Runs body(arg); returns the fault that stopped it, if any. The body must not hold
// locks or own resources that a jump out of it would leak.
Fault run_trapped(void (*body)(void*), void* arg);

// A lambda (or any callable) through run_trapped.
template <typename F>
Fault trapped(F&& f) {
    return run_trapped([](void* p) { (*static_cast<F*>(p))(); }, &f);
}

}  // namespace standin
