//! Runs a piece of sampler code compiled for the widest x86-64 vector extension the CPU
//! has, chosen at run time, so one portable loop gets AVX-512 or AVX2 code where
//! available without a second, hand-vectorised copy; and writes large outputs with
//! streaming stores. The one place rng-gen chooses instruction sets.
//!
//! The closure passed in must be `#[inline(always)]` (and so must what it calls that
//! should be vectorised): target features apply to code *inlined into* the
//! `#[target_feature]` functions below, not to functions they call. Only integer
//! operations and plain IEEE-754 f32/f64 arithmetic run this way (Rust never contracts
//! `a * b + c` into an FMA, and vector division and square root round like scalar ones),
//! so every variant produces the same bits; only speed differs. Tests run every sampler
//! at every [`SimdLevel`] the CPU has and compare with the scalar reference.

use tensor_core::SimdRequest;

/// An instruction set the samplers can be compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SimdLevel {
    /// AVX-512 F, BW, DQ and VL (x86-64-v4).
    Avx512,
    /// AVX2.
    Avx2,
    /// The compilation target's baseline (SSE2 on x86-64).
    Baseline,
}

impl SimdLevel {
    /// The widest level this CPU runs.
    #[inline(always)]
    pub(crate) fn detected() -> SimdLevel {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx512bw") && has!("avx512dq") && has!("avx512vl") {
                return SimdLevel::Avx512;
            }
            if has!("avx2") {
                return SimdLevel::Avx2;
            }
        }
        SimdLevel::Baseline
    }

    /// The level the samplers run at: [`SimdLevel::detected`], or a narrower one named by
    /// the environment variable `DITTO_SIMD` (`avx512`, `avx2` or `scalar`;
    /// [`tensor_core::simd_request`] reads it, and says why it exists). Every level gives
    /// the same bits, so the setting only changes speed. A level the CPU does not run
    /// falls back to the widest it does (as [`with_simd`] does).
    pub(crate) fn chosen() -> SimdLevel {
        let asked = match tensor_core::simd_request() {
            SimdRequest::Avx512 => SimdLevel::Avx512,
            SimdRequest::Avx2 => SimdLevel::Avx2,
            SimdRequest::Scalar => SimdLevel::Baseline,
        };
        asked.at_most(SimdLevel::detected())
    }

    /// `self`, or `widest` where `self` is wider (a CPU runs every level below its widest).
    fn at_most(self, widest: SimdLevel) -> SimdLevel {
        let rank = |l: SimdLevel| match l {
            SimdLevel::Baseline => 0,
            SimdLevel::Avx2 => 1,
            SimdLevel::Avx512 => 2,
        };
        if rank(self) <= rank(widest) {
            self
        } else {
            widest
        }
    }

    /// Every level this CPU runs, widest first (for tests that compare them).
    #[cfg(test)]
    pub(crate) fn available() -> Vec<SimdLevel> {
        let all = [SimdLevel::Avx512, SimdLevel::Avx2, SimdLevel::Baseline];
        let widest = all.iter().position(|&l| l == SimdLevel::detected());
        all[widest.unwrap_or(2)..].to_vec()
    }
}

/// `f()`, compiled for `level` if this CPU runs it, else for the widest level it runs.
#[inline(always)]
pub(crate) fn with_simd<R>(level: SimdLevel, f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        let widest = SimdLevel::detected();
        let runs =
            |l: SimdLevel| widest == l || (widest == SimdLevel::Avx512 && l == SimdLevel::Avx2);
        if level == SimdLevel::Avx512 && runs(level) {
            // SAFETY: the CPU has AVX-512 F/BW/DQ/VL (`detected`), all `avx512` needs.
            return unsafe { avx512(f) };
        }
        if level == SimdLevel::Avx2 && runs(level) {
            // SAFETY: the CPU has AVX2 (AVX2 or AVX-512 detected), all `avx2` needs.
            return unsafe { avx2(f) };
        }
        if level != SimdLevel::Baseline {
            return with_simd(widest, f);
        }
    }
    let _ = level;
    f()
}

/// `f()`, compiled for the level the samplers run at ([`SimdLevel::chosen`]).
#[inline(always)]
pub(crate) fn with_widest_simd<R>(f: impl FnOnce() -> R) -> R {
    with_simd(SimdLevel::chosen(), f)
}

/// `f()` with AVX-512 F/BW/DQ/VL enabled.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// `f()` with AVX2 enabled.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// Copies `src` into `dst` (same length) with streaming (non-temporal) stores where the
/// destination is 64-byte aligned, plain stores for the unaligned head and tail.
///
/// Why: a plain store to memory that is not in cache first reads the line (read for
/// ownership), so filling a buffer much larger than the caches moves every byte twice; a
/// streaming store writes whole lines without reading them. The CPU fill stages a few
/// batches in a small buffer and streams them out when the whole output is large
/// (`cpu_fill::STREAMING_BYTES`); small outputs stay on plain stores, which leave them in
/// cache for the next op. Values are identical either way. Call [`streaming_fence`]
/// after the last copy of a pass.
#[inline(always)]
pub(crate) fn stream_copy<T: Copy>(dst: &mut [T], src: &[T]) {
    debug_assert_eq!(dst.len(), src.len());
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let size = std::mem::size_of::<T>();
        let bytes = std::mem::size_of_val(dst);
        let base = dst.as_mut_ptr() as usize;
        let head = ((64 - base % 64) % 64).min(bytes);
        if size > 0 && head.is_multiple_of(size) && bytes - head >= 64 {
            let lines = (bytes - head) / 64;
            let (head_elems, body_elems) = (head / size, lines * 64 / size);
            dst[..head_elems].copy_from_slice(&src[..head_elems]);
            let out = dst[head_elems..].as_mut_ptr().cast::<__m128i>();
            let from = src[head_elems..].as_ptr().cast::<__m128i>();
            for i in 0..lines * 4 {
                // SAFETY: `out` is 64-byte aligned (after `head` bytes) and the `lines`
                // whole lines lie inside `dst`; `from` covers the same bytes of `src`
                // (read unaligned). SSE2 is part of the x86-64 baseline.
                unsafe { _mm_stream_si128(out.add(i), _mm_loadu_si128(from.add(i))) };
            }
            let done = head_elems + body_elems;
            dst[done..].copy_from_slice(&src[done..]);
            return;
        }
    }
    dst.copy_from_slice(src);
}

/// Orders earlier streaming stores before anything this thread does next (they are
/// weakly ordered); a no-op off x86-64.
#[inline(always)]
pub(crate) fn streaming_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of the x86-64 baseline.
    unsafe {
        std::arch::x86_64::_mm_sfence();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_levels_never_exceed_the_cpu() {
        use SimdLevel::{Avx2, Avx512, Baseline};
        for (asked, widest, got) in [
            (Avx512, Avx2, Avx2),
            (Avx512, Baseline, Baseline),
            (Avx2, Baseline, Baseline),
            (Avx2, Avx512, Avx2),
            (Baseline, Avx512, Baseline),
            (Avx512, Avx512, Avx512),
        ] {
            assert_eq!(asked.at_most(widest), got, "{asked:?} on {widest:?}");
        }
        // Whatever the environment says, the chosen level is one this CPU runs.
        assert!(SimdLevel::available().contains(&SimdLevel::chosen()));
    }

    #[test]
    fn stream_copy_copies_every_alignment_and_length() {
        let src: Vec<u16> = (0..2000u16).collect();
        for start in 0..40 {
            for len in [0, 1, 31, 32, 33, 64, 100, 999, 1900] {
                let mut dst = vec![0u16; 2000];
                stream_copy(&mut dst[start..start + len], &src[start..start + len]);
                streaming_fence();
                assert_eq!(&dst[start..start + len], &src[start..start + len]);
                assert!(dst[..start].iter().all(|&v| v == 0));
                assert!(dst[start + len..].iter().all(|&v| v == 0));
            }
        }
    }
}
