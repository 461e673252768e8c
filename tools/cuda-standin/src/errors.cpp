// cuGetErrorName / cuGetErrorString, and the per-thread explanation of the last failure.
#include "errors.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

struct ErrorName {
    int code;
    const char* name;
};

// Every CUresult name and number, generated from cudarc's bindings at build time.
constexpr ErrorName kErrorNames[] = {
#include "cuda_error_table.inc"
};

constexpr bool same_text(const char* a, const char* b) {
    while (*a != '\0' && *a == *b) {
        ++a;
        ++b;
    }
    return *a == *b;
}

constexpr int code_named(const char* name) {
    for (const ErrorName& e : kErrorNames) {
        if (same_text(e.name, name)) return e.code;
    }
    return -1;
}

// The numbers in api.h must be the driver's (as cudarc, hence ditto, sees them).
#define STANDIN_CHECK_CODE(c) static_assert(code_named(#c) == (c), #c " differs from cudarc's value")
STANDIN_CHECK_CODE(CUDA_SUCCESS);
STANDIN_CHECK_CODE(CUDA_ERROR_INVALID_VALUE);
STANDIN_CHECK_CODE(CUDA_ERROR_OUT_OF_MEMORY);
STANDIN_CHECK_CODE(CUDA_ERROR_NOT_INITIALIZED);
STANDIN_CHECK_CODE(CUDA_ERROR_NO_DEVICE);
STANDIN_CHECK_CODE(CUDA_ERROR_INVALID_DEVICE);
STANDIN_CHECK_CODE(CUDA_ERROR_INVALID_IMAGE);
STANDIN_CHECK_CODE(CUDA_ERROR_INVALID_CONTEXT);
STANDIN_CHECK_CODE(CUDA_ERROR_NO_BINARY_FOR_GPU);
STANDIN_CHECK_CODE(CUDA_ERROR_INVALID_PTX);
STANDIN_CHECK_CODE(CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
STANDIN_CHECK_CODE(CUDA_ERROR_INVALID_HANDLE);
STANDIN_CHECK_CODE(CUDA_ERROR_NOT_FOUND);
STANDIN_CHECK_CODE(CUDA_ERROR_ILLEGAL_ADDRESS);
STANDIN_CHECK_CODE(CUDA_ERROR_LAUNCH_FAILED);
STANDIN_CHECK_CODE(CUDA_ERROR_NOT_SUPPORTED);
STANDIN_CHECK_CODE(CUDA_ERROR_UNKNOWN);

const char* name_of(CUresult code) {
    for (const ErrorName& e : kErrorNames) {
        if (e.code == code) return e.name;
    }
    return nullptr;
}

// The driver's wording for the codes the stand-in returns; other codes get their name.
const char* description_of(CUresult code) {
    switch (code) {
        case CUDA_SUCCESS: return "no error";
        case CUDA_ERROR_INVALID_VALUE: return "invalid argument";
        case CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
        case CUDA_ERROR_NOT_INITIALIZED: return "initialization error";
        case CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected";
        case CUDA_ERROR_INVALID_DEVICE: return "invalid device ordinal";
        case CUDA_ERROR_INVALID_IMAGE: return "device kernel image is invalid";
        case CUDA_ERROR_INVALID_CONTEXT: return "invalid device context";
        case CUDA_ERROR_NO_BINARY_FOR_GPU: return "no kernel image is available for execution on the device";
        case CUDA_ERROR_INVALID_PTX: return "a PTX JIT compilation failed";
        case CUDA_ERROR_UNSUPPORTED_PTX_VERSION: return "the provided PTX was compiled with an unsupported toolchain.";
        case CUDA_ERROR_INVALID_HANDLE: return "invalid resource handle";
        case CUDA_ERROR_NOT_FOUND: return "named symbol not found";
        case CUDA_ERROR_ILLEGAL_ADDRESS: return "an illegal memory access was encountered";
        case CUDA_ERROR_LAUNCH_FAILED: return "unspecified launch failure";
        case CUDA_ERROR_NOT_SUPPORTED: return "operation not supported";
        default: return name_of(code);
    }
}

// The last failure on this thread: its code and the full sentence for cuGetErrorString.
// A small ring keeps earlier sentences alive, since callers may hold the pointer for a
// while after a later failure on the same thread.
struct LastError {
    CUresult code = CUDA_SUCCESS;
    unsigned slot = 0;
    std::string text[8];
};
thread_local LastError last_error;

bool is_loud(CUresult code) {
    return code == CUDA_ERROR_ILLEGAL_ADDRESS || code == CUDA_ERROR_LAUNCH_FAILED ||
           code == CUDA_ERROR_INVALID_PTX || code == CUDA_ERROR_INVALID_IMAGE ||
           code == CUDA_ERROR_NOT_SUPPORTED;
}

CUresult record(CUresult code, const char* call, const char* detail, bool loud) {
    LastError& last = last_error;
    last.slot = (last.slot + 1) % 8;
    std::string& text = last.text[last.slot];
    text = description_of(code);
    text += " [" STANDIN_LABEL ": ";
    text += call;
    text += ": ";
    text += detail;
    text += "]";
    last.code = code;
    if (loud || standin::tracing()) {
        standin::say("%s failed with %s: %s", call, name_of(code), detail);
    }
    return code;
}

}  // namespace

namespace standin {

bool tracing() {
    static const bool on = [] {
        const char* v = std::getenv("DITTO_CUDA_STANDIN_TRACE");
        return v != nullptr && std::strcmp(v, "1") == 0;
    }();
    return on;
}

void say(const char* fmt, ...) {
    char line[1024];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(line, sizeof line, fmt, args);
    va_end(args);
    std::fprintf(stderr, "[" STANDIN_LABEL "] %s\n", line);
}

CUresult fail(CUresult code, const char* call, const char* fmt, ...) {
    char detail[768];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(detail, sizeof detail, fmt, args);
    va_end(args);
    return record(code, call, detail, is_loud(code));
}

CUresult not_supported(const char* call, const char* why) {
    char detail[512];
    std::snprintf(detail, sizeof detail, "%s is not implemented by the stand-in%s%s", call,
                  why != nullptr ? ": " : "", why != nullptr ? why : "");
    // NVRTC asks for the driver's private export table on every compile and copes with
    // this answer; saying so each time would only be noise.
    const bool loud = std::strcmp(call, "cuGetExportTable") != 0;
    return record(CUDA_ERROR_NOT_SUPPORTED, call, detail, loud);
}

}  // namespace standin

extern "C" {

// What the generated stubs of unimplemented driver calls return.
CUresult ditto_standin_unimplemented(const char* call) { return standin::not_supported(call); }

CUresult cuGetErrorName(CUresult error, const char** pStr) {
    if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *pStr = name_of(error);
    return *pStr != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char** pStr) {
    if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (name_of(error) == nullptr) {
        *pStr = nullptr;
        return CUDA_ERROR_INVALID_VALUE;
    }
    const LastError& last = last_error;
    *pStr = (error != CUDA_SUCCESS && last.code == error) ? last.text[last.slot].c_str()
                                                          : description_of(error);
    return CUDA_SUCCESS;
}

}  // extern "C"
