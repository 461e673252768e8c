// gumbel.cuh on the host, behind a C ABI: every block of an op, as a grid-stride launch
// would compute them, through the very function the GPU kernel calls.
#include <cfloat>

#include "gumbel.cuh"

static_assert(FLT_EVAL_METHOD == 0, "f32 arithmetic must happen in f32 (SSE), not x87");

extern "C" void example_gumbel_host(uint64_t seed, uint64_t offset, uint64_t n, float loc,
                                    float scale, float* out) {
    for (uint64_t b = 0; b < ditto_blocks_for(n); ++b) {
        gumbel_block(seed, offset, b, n, loc, scale, out);
    }
}
