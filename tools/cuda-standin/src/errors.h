// Error reporting: every failing call returns a CUresult and leaves a sentence saying
// what was wrong, which cuGetErrorString returns for that code on the same thread (so
// cudarc's DriverError, which formats itself through cuGetErrorString, carries it).
#pragma once

#include "api.h"

namespace standin {

// Records why `call` failed with `code` (printf-style) and returns `code`. Loud codes
// (illegal address, launch failure, invalid PTX, unimplemented calls) are also printed
// to stderr; with DITTO_CUDA_STANDIN_TRACE=1 every failure is.
CUresult fail(CUresult code, const char* call, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

// CUDA_ERROR_NOT_SUPPORTED for a driver call the stand-in does not implement.
CUresult not_supported(const char* call, const char* why = nullptr);

// Prints one line to stderr, prefixed with the stand-in's label.
void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// True when DITTO_CUDA_STANDIN_TRACE=1.
bool tracing();

}  // namespace standin

// The label every message and device name carries.
#define STANDIN_LABEL "CUDA stand-in (host-executed)"
