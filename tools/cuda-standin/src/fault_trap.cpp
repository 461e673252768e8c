// SIGSEGV / SIGBUS / SIGFPE during host-executed device code, caught per thread.
#include "fault_trap.h"

#include <setjmp.h>
#include <signal.h>

#include <mutex>

namespace standin {
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE};

struct sigaction previous[3];

// Initial-exec TLS: reading it from a signal handler touches no lazily allocated memory.
__attribute__((tls_model("initial-exec"))) thread_local sigjmp_buf* armed = nullptr;
__attribute__((tls_model("initial-exec"))) thread_local Fault caught;

int slot_of(int sig) {
    for (int i = 0; i < 3; ++i) {
        if (kSignals[i] == sig) return i;
    }
    return 0;
}

void on_signal(int sig, siginfo_t* info, void* context) {
    sigjmp_buf* jump = armed;
    if (jump != nullptr) {
        armed = nullptr;
        caught.signal = sig;
        caught.address = reinterpret_cast<uintptr_t>(info->si_addr);
        siglongjmp(*jump, 1);
    }
    // Not ours: behave as if this handler were never installed.
    const struct sigaction& old = previous[slot_of(sig)];
    if ((old.sa_flags & SA_SIGINFO) != 0 && old.sa_sigaction != nullptr) {
        old.sa_sigaction(sig, info, context);
    } else if (old.sa_handler == SIG_IGN) {
        return;
    } else if (old.sa_handler == SIG_DFL) {
        // Returning re-runs the faulting instruction, which now gets the default action.
        signal(sig, SIG_DFL);
    } else {
        old.sa_handler(sig);
    }
}

void install() {
    static std::once_flag once;
    std::call_once(once, [] {
        for (int i = 0; i < 3; ++i) {
            struct sigaction action {};
            action.sa_sigaction = on_signal;
            action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
            sigemptyset(&action.sa_mask);
            sigaction(kSignals[i], &action, &previous[i]);
        }
    });
}

}  // namespace

Fault run_trapped(void (*body)(void*), void* arg) {
    install();
    sigjmp_buf jump;
    // Nested traps (the block-fiber runner traps inside a launch's trap): the outer one
    // is re-armed when the inner one ends, either way.
    sigjmp_buf* const outer = armed;
    caught = Fault{};
    if (sigsetjmp(jump, 1) == 0) {
        armed = &jump;
        body(arg);
        armed = outer;
        return Fault{};
    }
    // Back from on_signal: `armed` was cleared there.
    armed = outer;
    return caught;
}

}  // namespace standin
