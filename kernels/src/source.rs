//! The random kernels' CUDA sources, embedded in the binary, and the one translation
//! unit NVRTC compiles from them (headers inlined by tensor-core's
//! [`inline_includes`](tensor_core::cuda_source::inline_includes), so a built binary
//! needs no source tree on the GPU machine).

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

/// `random.cu` with its headers inlined (see [`tensor_core::cuda_source`]).
#[must_use]
pub fn translation_unit() -> String {
    tensor_core::cuda_source::inline_includes(RANDOM_CU, &HEADERS)
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
