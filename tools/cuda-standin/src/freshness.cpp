// Are the stand-in's host builds of the kernels still the code in the repository?
//
// The stand-in runs its own host build of every kernel, compiled when
// scripts/cuda_standin.sh last built it, while ditto's binaries embed the kernel sources
// when cargo builds them and NVRTC compiles those. Edit a kernel and rebuild only ditto,
// and the PTX a test loads says one thing while the host build that runs does another:
// the GPU tests would pass or fail on old code, silently. So the build writes
// kernel_sources.txt beside the library (each source's FNV-1a 64 hash and path, from
// generate.py's `manifest`), and the first module load of a process checks that every
// file listed is unchanged; if one is not, every module load fails and says to rebuild.
#include "freshness.h"

#include <dlfcn.h>

#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>

#include "errors.h"

namespace standin {
namespace {

// FNV-1a, 64 bits: the same function as generate.py's `fnv1a64` (a change detector for
// a developer's edits, not a defence against crafted files).
uint64_t fnv1a64(const std::string& bytes) {
    uint64_t hash = 0xcbf29ce484222325ull;
    for (unsigned char byte : bytes) {
        hash ^= byte;
        hash *= 0x100000001b3ull;
    }
    return hash;
}

bool read_file(const std::string& path, std::string* out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    std::ostringstream text;
    text << in.rdbuf();
    *out = text.str();
    return true;
}

// The folder this library was loaded from (by whichever of its names), where the build
// put the manifest.
std::string library_dir() {
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&library_dir), &info) == 0 || info.dli_fname == nullptr) return ".";
    const std::string path = info.dli_fname;
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
}

// Why the host builds cannot be trusted to be the sources on disk (a kernel source
// changed or was deleted since the build, or the manifest is unreadable), or "" when
// every source listed in the manifest is unchanged.
std::string why_out_of_date() {
    const std::string manifest_path = library_dir() + "/kernel_sources.txt";
    std::string manifest;
    if (!read_file(manifest_path, &manifest)) {
        return "the stand-in's list of the kernel sources it was built from (" + manifest_path +
               ") cannot be read";
    }
    std::istringstream lines(manifest);
    std::string line;
    while (std::getline(lines, line)) {
        const size_t tab = line.find('\t');
        if (tab != 16) return "the stand-in's manifest " + manifest_path + " has a malformed line (\"" + line + "\")";
        const std::string path = line.substr(tab + 1);
        std::string bytes;
        if (!read_file(path, &bytes)) return "the kernel source " + path + " was deleted (or cannot be read) since the stand-in was built";
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a64(bytes)));
        if (line.compare(0, tab, hex) != 0) return "the kernel source " + path + " changed since the stand-in was built";
    }
    return "";
}

}  // namespace

CUresult check_kernel_sources_unchanged(const char* call) {
    // Once per process: the answer cannot change in a way that would make old host
    // builds right again, and module loads are frequent.
    static std::once_flag once;
    static std::string why;
    std::call_once(once, [] { why = why_out_of_date(); });
    if (why.empty()) return CUDA_SUCCESS;
    return fail(CUDA_ERROR_INVALID_IMAGE, call,
                "%s, so its host builds of the kernels may not be the code NVRTC compiles; rebuild it: "
                "eval \"$(bash scripts/cuda_standin.sh --print-env)\"",
                why.c_str());
}

}  // namespace standin
