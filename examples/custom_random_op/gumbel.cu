// The Gumbel kernel: ditto's kernel convention, (seed, offset, n, parameters..., out),
// as a grid-stride loop over whole Philox blocks, so the launch geometry never changes a
// value. The body is gumbel.cuh's.
#include "gumbel.cuh"

extern "C" __global__ void example_gumbel_f32_kernel(uint64_t seed, uint64_t offset,
                                                     uint64_t n, float loc, float scale,
                                                     float* out) {
    for (uint64_t b = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; b < ditto_blocks_for(n);
         b += (uint64_t)gridDim.x * blockDim.x) {
        gumbel_block(seed, offset, b, n, loc, scale, out);
    }
}
