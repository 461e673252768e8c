//! Portable arithmetic (docs/contract.md §14): a process-wide switch, beside the
//! deterministic-algorithms one, under which every f32 op of ditto's training path gives
//! the same bits on every CPU (any SIMD level, any thread count) and every GPU.
//!
//! Deterministic mode makes results independent of *timing*; they may still depend on
//! the *machine*, because two operations are not ditto's own: `matmul` (gemm's blocking
//! and SIMD kernel on a CPU, cuBLAS's on a GPU) and `exp` / `log` (the platform's libm,
//! CUDA's libdevice). With portable arithmetic on:
//!
//! - `matmul` runs ditto's own kernels ([`matmul`] on the CPU,
//!   `portable_matmul.cu` on CUDA) in one defined order: every output element is one
//!   chain of fused multiply-adds over `k` ascending, starting from zero;
//! - `exp`, `log` and the ops built on them (`log_softmax`, hence cross-entropy) use
//!   ditto's own polynomial routines ([`math`]), written once in Rust and once in CUDA
//!   from correctly rounded operations only.
//!
//! It is off by default because gemm and cuBLAS are faster (benches/RESULTS.md). Like
//! [`use_deterministic_algorithms`](crate::use_deterministic_algorithms) the switch is
//! global: set it once at the start of a program, not from concurrently running tests.

mod hyperbolic;
pub mod math;
pub mod matmul;

use std::sync::atomic::{AtomicBool, Ordering};

use crate::{DType, Device};

static PORTABLE: AtomicBool = AtomicBool::new(false);

/// Turns portable arithmetic on or off for the whole process (PyTorch-style naming, as
/// `torch.use_deterministic_algorithms`).
pub fn use_portable_arithmetic(enabled: bool) {
    PORTABLE.store(enabled, Ordering::SeqCst);
}

/// True when portable arithmetic is on (see [`use_portable_arithmetic`]).
#[must_use]
pub fn are_portable_arithmetic_enabled() -> bool {
    PORTABLE.load(Ordering::Relaxed)
}

/// Whether a row's results (a matmul output row, its input gradient) are independent of
/// the other rows batched with it, for `dtype` on `device`: portable arithmetic on, and
/// its matmul is ditto's own there (f32 everywhere, f64 on the CPU; f64 on CUDA stays
/// cuBLAS, docs/contract.md §14). Outside it, gemm and cuBLAS choose blockings (and
/// split-k) by the matrix sizes, so a row's bits may change with the batch around it.
/// Data-parallel invariant mode asks this to decide whether one pass per rank gives the
/// bits of one pass per micro-shard.
#[must_use]
pub fn rows_are_batch_independent(dtype: DType, device: Device) -> bool {
    are_portable_arithmetic_enabled() && (dtype == DType::F32 || device == Device::Cpu)
}
