//! The CUDA sources, embedded in the binary, and the one translation unit NVRTC compiles.
//!
//! The `.cuh` headers are compiled twice (by NVRTC here, by the host compiler for the
//! parity tests), so they stay separate files; NVRTC gets them inlined into `random.cu`
//! in place of their `#include "..."` lines. Embedding with `include_str!` means a
//! built binary (a test, a bench) needs no source tree on the GPU machine.

/// The headers `random.cu` may include, by the name it includes them with.
pub const HEADERS: [(&str, &str); 4] = [
    ("ditto_types.cuh", include_str!("../cuda/ditto_types.cuh")),
    ("philox.cuh", include_str!("../cuda/philox.cuh")),
    ("ditto_math.cuh", include_str!("../cuda/ditto_math.cuh")),
    (
        "random_blocks.cuh",
        include_str!("../cuda/random_blocks.cuh"),
    ),
];

/// The kernels' translation unit, before include expansion.
pub const RANDOM_CU: &str = include_str!("../cuda/random.cu");

/// Every `extern "C" __global__` kernel in `random.cu`.
pub const KERNEL_NAMES: [&str; 22] = [
    "ditto_bits_u32_kernel",
    "ditto_uniform_f32_kernel",
    "ditto_uniform_f16_kernel",
    "ditto_uniform_bf16_kernel",
    "ditto_uniform_f64_kernel",
    "ditto_randint_i64_kernel",
    "ditto_normal_f32_kernel",
    "ditto_normal_f16_kernel",
    "ditto_normal_bf16_kernel",
    "ditto_bernoulli_f32_kernel",
    "ditto_bernoulli_f16_kernel",
    "ditto_bernoulli_bf16_kernel",
    "ditto_bernoulli_f64_kernel",
    "ditto_bernoulli_u8_kernel",
    "ditto_dropout_f32_kernel",
    "ditto_dropout_f16_kernel",
    "ditto_dropout_bf16_kernel",
    "ditto_dropout_f64_kernel",
    "ditto_dropout_backward_f32_kernel",
    "ditto_dropout_backward_f16_kernel",
    "ditto_dropout_backward_bf16_kernel",
    "ditto_dropout_backward_f64_kernel",
];

/// `random.cu` with each `#include "name"` of a known header replaced by the header's
/// text, recursively, each header at most once (they have include guards anyway).
/// Other includes are left to NVRTC.
#[must_use]
pub fn translation_unit() -> String {
    let mut out = String::new();
    let mut seen = Vec::new();
    expand(RANDOM_CU, &mut seen, &mut out);
    out
}

fn expand(text: &str, seen: &mut Vec<&'static str>, out: &mut String) {
    for line in text.lines() {
        match included_header(line) {
            Some((name, body)) => {
                if !seen.contains(&name) {
                    seen.push(name);
                    out.push_str(&format!("// ---- begin {name} ----\n"));
                    expand(body, seen, out);
                    out.push_str(&format!("// ---- end {name} ----\n"));
                }
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
}

/// The embedded header a line includes, if it is `#include "<known header>"`.
fn included_header(line: &str) -> Option<(&'static str, &'static str)> {
    let rest = line.trim_start().strip_prefix('#')?.trim_start();
    let name = rest
        .strip_prefix("include")?
        .trim()
        .strip_prefix('"')?
        .strip_suffix('"')?;
    HEADERS.iter().find(|(n, _)| *n == name).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_header_is_inlined_once_and_no_local_include_is_left() {
        let tu = translation_unit();
        for (name, _) in HEADERS {
            assert_eq!(
                tu.matches(&format!("// ---- begin {name} ----")).count(),
                1,
                "{name}"
            );
        }
        assert!(
            !tu.contains("#include \""),
            "a local include was left for NVRTC"
        );
        // The Philox rounds are stated once.
        assert_eq!(tu.matches("DITTO_HD void ditto_philox4x32_10").count(), 1);
    }

    #[test]
    fn every_kernel_name_is_defined() {
        let tu = translation_unit();
        for name in KERNEL_NAMES {
            let direct = tu.contains(&format!("void {name}("));
            let via_macro = tu.contains(&format!("({name},"));
            assert!(direct || via_macro, "{name} is not in random.cu");
        }
    }
}
