// cuModuleLoadData and cuModuleGetFunction: PTX in, host builds out.
//
// A module is the PTX NVRTC produced (so NVRTC still compiles every kernel); each
// `.entry` resolves to the host build registered under the same name, after checking
// that the PTX's parameter list and the C++ signature agree in count, sizes and
// alignments. Like a real driver, the stand-in refuses PTX newer than the ISA its CUDA
// version reads (9.0 for the default 13.0; DITTO_CUDA_STANDIN_DRIVER_VERSION plays an
// older line) and PTX for a newer GPU than the device. Host builds older than the kernel sources on disk
// are refused too (freshness.cpp).
#include "module.h"

#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "cuda_host_shim.h"
#include "errors.h"
#include "freshness.h"

// The simulated threads' built-in variables (declared in cuda_host_shim.h).
STANDIN_TLS uint3 blockIdx;
STANDIN_TLS uint3 threadIdx;
STANDIN_TLS dim3 blockDim;
STANDIN_TLS dim3 gridDim;

namespace standin {
namespace {

// Host builds register themselves while the library loads (static initialisers of the
// generated kernel translation units), before any call can read this.
std::map<std::string, HostKernel>& host_kernels() {
    static std::map<std::string, HostKernel> all;
    return all;
}

std::set<Module*>& modules() {
    static std::set<Module*> all;
    return all;
}

std::set<Function*>& functions() {
    static std::set<Function*> all;
    return all;
}

void unload(Module* m) {
    for (Function* f : m->functions) {
        functions().erase(f);
        delete f;
    }
    modules().erase(m);
    delete m;
}

// The newest PTX ISA a driver for CUDA `version` (cuDriverGetVersion's number) reads, as
// the PTX ISA release notes pair them: 13.x reads 9.x; 12.0-12.5 read 8.0-8.5, 12.6 8.5,
// 12.8 8.7, 12.9 8.8; 11.x reads 7.x.
void max_ptx_isa(int version, int* major, int* minor) {
    const int cuda_major = version / 1000, cuda_minor = version % 1000 / 10;
    if (cuda_major >= 13) {
        *major = 9;
        *minor = cuda_minor;
    } else if (cuda_major == 12) {
        *major = 8;
        *minor = cuda_minor <= 5 ? cuda_minor : cuda_minor - 1;
    } else {
        *major = 7;
        *minor = cuda_minor;
    }
}

// The host builds of `ptx`'s entries must take exactly the parameters the PTX declares.
CUresult check_signatures(const PtxModule& ptx, const char* call) {
    for (const PtxEntry& entry : ptx.entries) {
        const HostKernel* host = find_host_kernel(entry.name);
        if (host == nullptr) continue;  // reported if someone asks for it
        if (host->params.size() != entry.params.size()) {
            return fail(CUDA_ERROR_INVALID_PTX, call,
                        "%s: the PTX declares %zu parameters, the host build (%s) takes %zu; rebuild "
                        "the stand-in (scripts/cuda_standin.sh)",
                        entry.name.c_str(), entry.params.size(), host->source, host->params.size());
        }
        for (size_t i = 0; i < entry.params.size(); ++i) {
            const PtxParam& p = entry.params[i];
            const ParamInfo& h = host->params[i];
            if (p.size != h.size || p.align != h.align) {
                return fail(CUDA_ERROR_INVALID_PTX, call,
                            "%s: parameter %zu is %zu bytes aligned to %zu in the PTX but %zu aligned to "
                            "%zu in the host build (%s)",
                            entry.name.c_str(), i, p.size, p.align, h.size, h.align, host->source);
            }
        }
    }
    return CUDA_SUCCESS;
}

CUresult load(CUmodule* out, const void* image, const char* call) {
    if (out == nullptr || image == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, call, "NULL pointer");
    const unsigned char* bytes = static_cast<const unsigned char*>(image);
    if (std::memcmp(bytes, "\x7f" "ELF", 4) == 0 || std::memcmp(bytes, "\x50\xed\x55\xba", 4) == 0) {
        return not_supported(call, "cubin and fatbin images (the stand-in resolves PTX .entry names only)");
    }
    PtxModule ptx;
    std::string error;
    if (!parse_ptx(static_cast<const char*>(image), &ptx, &error)) {
        return fail(CUDA_ERROR_INVALID_PTX, call, "%s", error.c_str());
    }
    CUresult fresh = check_kernel_sources_unchanged(call);
    if (fresh != CUDA_SUCCESS) return fresh;
    std::lock_guard<std::mutex> guard(state_lock());
    Context* ctx = nullptr;
    CUresult ok = require_current(call, &ctx);
    if (ok != CUDA_SUCCESS) return ok;
    int max_major = 0, max_minor = 0;
    const int driver = driver_version();
    max_ptx_isa(driver, &max_major, &max_minor);
    if (ptx.version_major > max_major || (ptx.version_major == max_major && ptx.version_minor > max_minor)) {
        return fail(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, call,
                    "PTX ISA %d.%d is newer than the %d.%d a CUDA %d.%d driver reads",
                    ptx.version_major, ptx.version_minor, max_major, max_minor, driver / 1000,
                    driver % 1000 / 10);
    }
    const DeviceInfo& d = devices()[ctx->device];
    if (ptx.target_sm > d.cc_major * 10 + d.cc_minor) {
        return fail(CUDA_ERROR_NO_BINARY_FOR_GPU, call, "PTX for sm_%d cannot run on device %d (compute %d.%d)",
                    ptx.target_sm, ctx->device, d.cc_major, d.cc_minor);
    }
    ok = check_signatures(ptx, call);
    if (ok != CUDA_SUCCESS) return ok;
    Module* m = new Module{ctx, ctx->generation, std::move(ptx), {}};
    modules().insert(m);
    *out = m;
    return CUDA_SUCCESS;
}

}  // namespace

void register_kernel(const HostKernel& kernel) { host_kernels()[kernel.name] = kernel; }

const HostKernel* find_host_kernel(const std::string& name) {
    auto it = host_kernels().find(name);
    return it == host_kernels().end() ? nullptr : &it->second;
}

CUresult live_module(CUmodule module, const char* call) {
    if (modules().count(module) == 0) return fail(CUDA_ERROR_INVALID_HANDLE, call, "not a loaded module");
    if (module->generation != module->ctx->generation) {
        return fail(CUDA_ERROR_INVALID_HANDLE, call, "the context of the module was destroyed");
    }
    return require_live(module->ctx, call);
}

CUresult live_function(CUfunction function, const char* call) {
    if (functions().count(function) == 0) return fail(CUDA_ERROR_INVALID_HANDLE, call, "not a live function");
    return live_module(function->module, call);
}

void unload_modules_of(Context* ctx) {
    std::vector<Module*> doomed;
    for (Module* m : modules()) {
        if (m->ctx == ctx) doomed.push_back(m);
    }
    for (Module* m : doomed) unload(m);
}

}  // namespace standin

using namespace standin;

extern "C" {

CUresult cuModuleLoadData(CUmodule* out, const void* image) { return load(out, image, "cuModuleLoadData"); }

CUresult cuModuleLoadDataEx(CUmodule* out, const void* image, unsigned int, void*, void**) {
    return load(out, image, "cuModuleLoadDataEx");
}

CUresult cuModuleUnload(CUmodule module) {
    std::lock_guard<std::mutex> guard(state_lock());
    if (modules().count(module) == 0) return fail(CUDA_ERROR_INVALID_HANDLE, "cuModuleUnload", "not a loaded module");
    unload(module);
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* out, CUmodule module, const char* name) {
    if (out == nullptr || name == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, "cuModuleGetFunction", "NULL pointer");
    std::lock_guard<std::mutex> guard(state_lock());
    const CUresult ok = live_module(module, "cuModuleGetFunction");
    if (ok != CUDA_SUCCESS) return ok;
    const PtxEntry* entry = nullptr;
    for (const PtxEntry& e : module->ptx.entries) {
        if (e.name == name) entry = &e;
    }
    if (entry == nullptr) {
        return fail(CUDA_ERROR_NOT_FOUND, "cuModuleGetFunction", "the module has no .entry %s", name);
    }
    const HostKernel* host = find_host_kernel(name);
    if (host == nullptr) {
        return fail(CUDA_ERROR_NOT_FOUND, "cuModuleGetFunction",
                    "kernel %s has no host build: the stand-in builds every __global__ of crates/kernels/cuda/*.cu "
                    "and crates/tensor-core/cuda/*.cu; rebuild it (scripts/cuda_standin.sh) or add the source",
                    name);
    }
    for (Function* f : module->functions) {
        if (f->entry == entry) {
            *out = f;
            return CUDA_SUCCESS;
        }
    }
    Function* f = new Function{module, entry, host};
    module->functions.push_back(f);
    functions().insert(f);
    *out = f;
    return CUDA_SUCCESS;
}

CUresult cuFuncGetAttribute(int* value, int attribute, CUfunction function) {
    if (value == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, "cuFuncGetAttribute", "NULL pointer");
    std::lock_guard<std::mutex> guard(state_lock());
    const CUresult ok = live_function(function, "cuFuncGetAttribute");
    if (ok != CUDA_SUCCESS) return ok;
    const PtxModule& ptx = function->module->ptx;
    switch (attribute) {
        case 0:  // MAX_THREADS_PER_BLOCK
            *value = function->entry->max_threads != 0 ? static_cast<int>(function->entry->max_threads) : 1024;
            return CUDA_SUCCESS;
        case 1:  // SHARED_SIZE_BYTES
        case 2:  // CONST_SIZE_BYTES
        case 3:  // LOCAL_SIZE_BYTES
            *value = 0;
            return CUDA_SUCCESS;
        case 5:  // PTX_VERSION
            *value = ptx.version_major * 10 + ptx.version_minor;
            return CUDA_SUCCESS;
        case 6:  // BINARY_VERSION
            *value = ptx.target_sm;
            return CUDA_SUCCESS;
        default:
            return not_supported("cuFuncGetAttribute", "this function attribute (register counts need ptxas)");
    }
}

CUresult cuFuncSetCacheConfig(CUfunction function, int) {
    std::lock_guard<std::mutex> guard(state_lock());
    return live_function(function, "cuFuncSetCacheConfig");
}

}  // extern "C"
