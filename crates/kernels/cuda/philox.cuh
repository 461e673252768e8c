// Philox4x32-10 (Random123, Salmon et al. SC'11): the only statement of its rounds in
// C++. Twin of crates/rng-gen/src/stream/philox.rs; docs/contract.md §2 lists the known
// answers and §3 the key / counter layout used below.
#ifndef DITTO_PHILOX_CUH
#define DITTO_PHILOX_CUH

// The host/device shim shared with tensor-core's kernels, by name: every ditto CUDA
// header is included by its file name, with crates/kernels/cuda and
// crates/tensor-core/cuda on the include path (ditto_build::ditto_include_dirs).
#include "ditto_host_device.cuh"

#define DITTO_PHILOX_M0 0xD2511F53u
#define DITTO_PHILOX_M1 0xCD9E8D57u
#define DITTO_PHILOX_W0 0x9E3779B9u
#define DITTO_PHILOX_W1 0xBB67AE85u

// Ten rounds on `ctr` under key `(k0, k1)`, bumping the key between rounds; the result
// replaces `ctr`. One round: hi0:lo0 = M0*c0, hi1:lo1 = M1*c2, new counter
// (hi1^c1^k0, lo1, hi0^c3^k1, lo0).
DITTO_HD void ditto_philox4x32_10(uint32_t ctr[4], uint32_t k0, uint32_t k1) {
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += DITTO_PHILOX_W0;
            k1 += DITTO_PHILOX_W1;
        }
        const uint64_t p0 = (uint64_t)DITTO_PHILOX_M0 * ctr[0];
        const uint64_t p1 = (uint64_t)DITTO_PHILOX_M1 * ctr[2];
        const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        const uint32_t c1 = ctr[1], c3 = ctr[3];
        ctr[0] = hi1 ^ c1 ^ k0;
        ctr[1] = lo1;
        ctr[2] = hi0 ^ c3 ^ k1;
        ctr[3] = lo0;
    }
}

// The four words of block `block` of the stream keyed by `seed`: key (seed lo, seed hi),
// counter (block lo, block hi, 0, 0). Block numbers wrap modulo 2^64.
DITTO_HD void ditto_block_words(uint64_t seed, uint64_t block, uint32_t out[4]) {
    out[0] = (uint32_t)block;
    out[1] = (uint32_t)(block >> 32);
    out[2] = 0;
    out[3] = 0;
    ditto_philox4x32_10(out, (uint32_t)seed, (uint32_t)(seed >> 32));
}

#endif  // DITTO_PHILOX_CUH
