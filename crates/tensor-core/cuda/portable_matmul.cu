// ditto's portable matmul on CUDA (docs/contract.md §14): C (m x n, row-major) = A * B
// with every output element one chain of fused multiply-adds over k ascending, starting
// from +0.0, exactly as the CPU's portable kernels (crates/tensor-core/src/portable/
// matmul) compute it, so the bits are the same on every GPU and on the CPU.
//
// Tiled through shared memory: a block of 16 x 16 threads owns a 64 x 64 tile of C, each
// thread a 4 x 4 patch of it, and walks k in slices of 16: the block copies the slice's
// A (64 x 16) and B (16 x 64) into shared memory, synchronises, and each thread carries
// its 16 chains on by the slice's k in ascending order. No split-k (one thread owns an
// element's whole chain), no tensor cores, and the multiply-add is the explicit
// round-to-nearest intrinsic, which the compiler may neither contract differently nor
// reassociate. A and B are read through their strides, so transposed views need no copy.
// It runs in its own translation unit because it is the one kernel that needs
// __syncthreads (the CUDA stand-in runs such kernels' blocks as fibers).

// tensor_ops.cuh: DittoShape / DittoView and ditto_position, for the batched kernel's
// batch dimensions (and portable_math.cuh through it).
#include "tensor_ops.cuh"

#define DITTO_PMM_TILE 64
#define DITTO_PMM_SLICE 16
#define DITTO_PMM_THREADS 16
#define DITTO_PMM_PATCH 4

// One fused multiply-add, a * b + c rounded once (IEEE-754 fusedMultiplyAdd).
DITTO_HD float ditto_fma_rn(float a, float b, float c) {
#ifdef __CUDA_ARCH__
    return __fmaf_rn(a, b, c);
#else
    return __builtin_fmaf(a, b, c);
#endif
}

// The block's 64 x 64 tile of one product, run by blocks of (16, 16) threads (every
// thread of the block calls it with the same arguments: it synchronises them).
// A's element (i, p) is a[a_offset + i * a_row + p * a_col]; B's (p, j) likewise.
__device__ void ditto_portable_matmul_tile(ditto_u64 m, ditto_u64 n, ditto_u64 k, const float* a,
                                           ditto_u64 a_offset, ditto_u64 a_row, ditto_u64 a_col,
                                           const float* b, ditto_u64 b_offset, ditto_u64 b_row,
                                           ditto_u64 b_col, float* c) {
    __shared__ float a_tile[DITTO_PMM_SLICE][DITTO_PMM_TILE];
    __shared__ float b_tile[DITTO_PMM_SLICE][DITTO_PMM_TILE];
    const unsigned tx = threadIdx.x, ty = threadIdx.y;
    const unsigned linear = ty * DITTO_PMM_THREADS + tx;  // 0 .. 255
    const ditto_u64 row0 = (ditto_u64)blockIdx.y * DITTO_PMM_TILE;
    const ditto_u64 col0 = (ditto_u64)blockIdx.x * DITTO_PMM_TILE;

    float acc[DITTO_PMM_PATCH][DITTO_PMM_PATCH];
    for (int i = 0; i < DITTO_PMM_PATCH; ++i)
        for (int j = 0; j < DITTO_PMM_PATCH; ++j) acc[i][j] = 0.0f;

    for (ditto_u64 k0 = 0; k0 < k; k0 += DITTO_PMM_SLICE) {
        // Each of the 256 threads copies 4 of the 1024 values of each slice (zeros
        // outside the matrices; they never enter a kept chain, see `depth` below).
        for (unsigned e = linear; e < DITTO_PMM_SLICE * DITTO_PMM_TILE; e += 256) {
            const unsigned p = e / DITTO_PMM_TILE, r = e % DITTO_PMM_TILE;
            const ditto_u64 i = row0 + r, kk = k0 + p, j = col0 + r;
            a_tile[p][r] = (i < m && kk < k) ? a[a_offset + i * a_row + kk * a_col] : 0.0f;
            b_tile[p][r] = (j < n && kk < k) ? b[b_offset + kk * b_row + j * b_col] : 0.0f;
        }
        __syncthreads();
        // Only the slice's real depths: a padded k would add fma(0, 0, acc), which turns
        // a -0.0 chain into +0.0.
        const unsigned depth = (unsigned)(k - k0 < DITTO_PMM_SLICE ? k - k0 : DITTO_PMM_SLICE);
        for (unsigned p = 0; p < depth; ++p) {
            float a_values[DITTO_PMM_PATCH], b_values[DITTO_PMM_PATCH];
            for (int i = 0; i < DITTO_PMM_PATCH; ++i) a_values[i] = a_tile[p][ty * DITTO_PMM_PATCH + i];
            for (int j = 0; j < DITTO_PMM_PATCH; ++j) b_values[j] = b_tile[p][tx * DITTO_PMM_PATCH + j];
            for (int i = 0; i < DITTO_PMM_PATCH; ++i)
                for (int j = 0; j < DITTO_PMM_PATCH; ++j)
                    acc[i][j] = ditto_fma_rn(a_values[i], b_values[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (int i = 0; i < DITTO_PMM_PATCH; ++i) {
        const ditto_u64 row = row0 + ty * DITTO_PMM_PATCH + i;
        if (row >= m) continue;
        for (int j = 0; j < DITTO_PMM_PATCH; ++j) {
            const ditto_u64 col = col0 + tx * DITTO_PMM_PATCH + j;
            if (col < n) c[row * n + col] = acc[i][j];
        }
    }
}

// Launched with blocks of (16, 16) threads and a grid of (ceil(n / 64), ceil(m / 64)).
extern "C" __global__ void ditto_portable_matmul_f32(ditto_u64 m, ditto_u64 n, ditto_u64 k,
                                                     const float* a, ditto_u64 a_offset,
                                                     ditto_u64 a_row, ditto_u64 a_col,
                                                     const float* b, ditto_u64 b_offset,
                                                     ditto_u64 b_row, ditto_u64 b_col, float* c) {
    ditto_portable_matmul_tile(m, n, k, a, a_offset, a_row, a_col, b, b_offset, b_row, b_col, c);
}

// The batched product [..., m, k] x [..., k, n]: entry z (row-major over `batch`) of A
// starts at ditto_position(batch, a_batch, z) (a_batch.offset is A's storage offset), of
// B likewise, and of C (dense) at z * m * n. Grid (ceil(n / 64), ceil(m / 64), up to
// 65535); the z dimension strides over the entries, the same for every thread of a block.
extern "C" __global__ void ditto_portable_matmul_batched_f32(ditto_u64 entries, DittoShape batch,
                                                             DittoView a_batch, DittoView b_batch,
                                                             ditto_u64 m, ditto_u64 n, ditto_u64 k,
                                                             const float* a, ditto_u64 a_row,
                                                             ditto_u64 a_col, const float* b,
                                                             ditto_u64 b_row, ditto_u64 b_col,
                                                             float* c) {
    for (ditto_u64 z = blockIdx.z; z < entries; z += gridDim.z) {
        ditto_portable_matmul_tile(m, n, k, a, ditto_position(batch, a_batch, z), a_row, a_col, b,
                                   ditto_position(batch, b_batch, z), b_row, b_col, c + z * m * n);
    }
}
