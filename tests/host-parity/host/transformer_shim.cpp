// The transformer ops' device math (cuda/transformer_ops.cuh, cuda/portable_math.cuh)
// compiled for the host behind a C ABI, for the parity tests (tensor_core::host_parity):
// ditto's portable tanh, GELU's building block, held against the Rust routine over the
// f32 inputs as exp and log are (tests/integration/portable_math_exhaustive.rs). The
// kernels themselves run on the host under the CUDA stand-in
// (tests/integration/gpu_transformer_ops.rs).
//
// Built by tensor-core's build.rs (feature `host-parity`) with the flags of
// tensor_ops_shim.cpp: -ffp-contract=off, SSE floats.
#include <cfloat>

#include "transformer_ops.cuh"

static_assert(FLT_EVAL_METHOD == 0, "f32 arithmetic must happen in f32 (SSE), not x87");

extern "C" {

// out[i] = ditto_portable_tanh(x[i]) for i < n.
void ditto_host_portable_tanh(ditto_u64 n, const float* x, float* out) {
    for (ditto_u64 i = 0; i < n; ++i) out[i] = ditto_portable_tanh(x[i]);
}

}  // extern "C"
