//! `DITTO_SIMD`: the one environment variable that narrows the vector instructions
//! ditto's own CPU kernels use (the random samplers of rng-gen, the portable matmul).
//!
//! Why: to measure a narrower level on a wider CPU (the AVX2 path on an AVX-512 machine,
//! benches/RESULTS.md), and to let a user rule out a vector path when chasing a problem.
//! Every level of every kernel gives the same bits (that is each kernel's contract, and
//! its tests compare the levels), so the setting changes speed only. It never widens:
//! each kernel still checks what the CPU runs. gemm, the default matmul, is not ditto's
//! and does not read it.

use std::sync::OnceLock;

/// The widest vector level `DITTO_SIMD` allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SimdRequest {
    /// `scalar` (or `baseline`): no vector kernels beyond the target's baseline.
    Scalar,
    /// `avx2`: at most AVX2 (with FMA where a kernel needs it).
    Avx2,
    /// `avx512` (or `avx-512`), or the variable unset: whatever the CPU runs.
    Avx512,
}

impl SimdRequest {
    /// The level a `DITTO_SIMD` value names (case and surrounding spaces ignored).
    #[must_use]
    pub fn parse(name: &str) -> Option<SimdRequest> {
        match name.trim().to_ascii_lowercase().as_str() {
            "avx512" | "avx-512" => Some(SimdRequest::Avx512),
            "avx2" => Some(SimdRequest::Avx2),
            "scalar" | "baseline" => Some(SimdRequest::Scalar),
            _ => None,
        }
    }
}

/// The level `DITTO_SIMD` asks for, read once per process; [`SimdRequest::Avx512`] (no
/// limit) when it is unset. An unknown value is reported once on stderr and ignored.
#[must_use]
pub fn simd_request() -> SimdRequest {
    static REQUEST: OnceLock<SimdRequest> = OnceLock::new();
    *REQUEST.get_or_init(|| match std::env::var("DITTO_SIMD") {
        Err(_) => SimdRequest::Avx512,
        Ok(asked) => SimdRequest::parse(&asked).unwrap_or_else(|| {
            eprintln!(
                "ditto: DITTO_SIMD={asked:?} is not one of avx512, avx2, scalar; ignoring it"
            );
            SimdRequest::Avx512
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::SimdRequest;

    #[test]
    fn names_parse_and_unknown_ones_do_not() {
        assert_eq!(SimdRequest::parse(" AVX2 "), Some(SimdRequest::Avx2));
        assert_eq!(SimdRequest::parse("avx-512"), Some(SimdRequest::Avx512));
        assert_eq!(SimdRequest::parse("baseline"), Some(SimdRequest::Scalar));
        assert_eq!(SimdRequest::parse("sse9"), None);
        assert!(SimdRequest::Scalar < SimdRequest::Avx2 && SimdRequest::Avx2 < SimdRequest::Avx512);
    }
}
