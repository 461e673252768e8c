//! Runs a piece of sampler code compiled for the widest x86-64 vector extension the CPU
//! has, chosen at run time, so one portable loop gets AVX-512 or AVX2 code where
//! available without a second, hand-vectorised copy. The one place rng-gen chooses an
//! instruction set: the batched Philox and the dropout passes both go through it.
//!
//! The closure passed in must be `#[inline(always)]` (and so must what it calls that
//! should be vectorised): target features apply to code *inlined into* the
//! `#[target_feature]` functions below, not to functions they call. Only integer
//! operations and plain IEEE-754 f32/f64 arithmetic run this way (Rust never contracts
//! `a * b + c` into an FMA), so every variant produces the same bits; only speed differs.

/// `f()`, compiled with AVX-512F, with AVX2, or for the target's baseline, whichever is
/// the widest this CPU supports.
#[inline(always)]
pub(crate) fn with_widest_simd<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked just above), all `avx512f` needs.
            return unsafe { avx512f(f) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above), all `avx2` needs.
            return unsafe { avx2(f) };
        }
    }
    f()
}

/// `f()` with AVX-512F enabled.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512f<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// `f()` with AVX2 enabled (also called directly by tests, to check the AVX2 build on
/// CPUs where the dispatch picks AVX-512).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}
