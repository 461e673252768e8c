// Loaded modules and their functions: the PTX's entries, each resolved to a host build.
#pragma once

#include <string>
#include <vector>

#include "api.h"
#include "context.h"
#include "host_kernel.h"
#include "ptx.h"

namespace standin {

struct Function;

struct Module {
    Context* ctx;
    unsigned generation;
    PtxModule ptx;
    std::vector<Function*> functions;
};

struct Function {
    Module* module;
    const PtxEntry* entry;
    const HostKernel* host;
};

// The registered host build named `name`, or nullptr.
const HostKernel* find_host_kernel(const std::string& name);

// Checks that a module or function handle is live (and its context); state_lock held.
CUresult live_module(CUmodule module, const char* call);
CUresult live_function(CUfunction function, const char* call);

// Unloads every module of `ctx` (its context was destroyed); state_lock held.
void unload_modules_of(Context* ctx);

}  // namespace standin
