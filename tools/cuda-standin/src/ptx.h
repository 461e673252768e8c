// Reading what the stand-in needs from the PTX that NVRTC produced: the PTX ISA version,
// the target, and each `.entry` with its parameter sizes and launch bounds. No PTX is
// executed: each entry runs as the host build of the kernel with its name.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace standin {

struct PtxParam {
    size_t size;
    size_t align;
};

struct PtxEntry {
    std::string name;
    std::vector<PtxParam> params;
    unsigned max_threads = 0;  // product of .maxntid, 0 when absent
    unsigned req_ntid[3] = {0, 0, 0};  // .reqntid, all 0 when absent
};

struct PtxModule {
    int version_major = 0;
    int version_minor = 0;
    int target_sm = 0;  // e.g. 90 for sm_90 / sm_90a
    std::vector<PtxEntry> entries;
};

// Parses `text`; on failure returns false with `error` saying what was malformed.
bool parse_ptx(const std::string& text, PtxModule* out, std::string* error);

}  // namespace standin
