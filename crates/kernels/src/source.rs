//! The random kernels' CUDA sources, embedded in the binary, and the one translation
//! unit NVRTC compiles from them (headers inlined by tensor-core's
//! [`inline_includes`](tensor_core::cuda_source::inline_includes), so a built binary
//! needs no source tree on the GPU machine).
//!
//! A downstream crate's kernel that includes ditto's headers gets its translation unit
//! from [`translation_unit_with`].

/// The name every ditto header includes the shared host/device shim by: its file name.
/// Every ditto header is included by file name, so one rule holds for NVRTC (which gets
/// the text inlined under this name) and for host compilers (the parity builds, the CUDA
/// stand-in, a downstream build script), which have `crates/kernels/cuda/` and
/// `crates/tensor-core/cuda/` on their include path (`ditto_build::ditto_include_dirs`);
/// no header depends on where the other folder sits.
pub const HOST_DEVICE_SHIM: &str = "ditto_host_device.cuh";

/// The name `ditto_math.cuh` includes tensor-core's portable f32 math by (its `ln` is
/// that header's logarithm, so the routine is written once for CUDA): its file name, as
/// for [`HOST_DEVICE_SHIM`].
pub const PORTABLE_MATH: &str = "portable_math.cuh";

/// The headers a kernel may include, by the name they are included with.
pub const HEADERS: [(&str, &str); 6] = [
    (
        HOST_DEVICE_SHIM,
        tensor_core::cuda_source::HOST_DEVICE_HEADER,
    ),
    (
        PORTABLE_MATH,
        tensor_core::cuda_source::PORTABLE_MATH_HEADER,
    ),
    ("philox.cuh", include_str!("../cuda/philox.cuh")),
    ("ditto_math.cuh", include_str!("../cuda/ditto_math.cuh")),
    (
        "random_blocks.cuh",
        include_str!("../cuda/random_blocks.cuh"),
    ),
    ("dropout.cuh", include_str!("../cuda/dropout.cuh")),
];

/// The kernels' translation unit, before include expansion.
pub const RANDOM_CU: &str = include_str!("../cuda/random.cu");

/// Every `extern "C" __global__` kernel in `random.cu`.
pub const KERNEL_NAMES: [&str; 27] = [
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
    "ditto_dropout_graphed_f32_kernel",
    "ditto_dropout_graphed_f16_kernel",
    "ditto_dropout_graphed_bf16_kernel",
    "ditto_dropout_graphed_f64_kernel",
    "ditto_philox_advance_kernel",
];

/// The fused causal attention's translation unit (its own: its kernels synchronise
/// blocks), before include expansion.
pub const ATTENTION_CU: &str = include_str!("../cuda/attention.cu");

/// Every `extern "C" __global__` kernel in `attention.cu`.
pub const ATTENTION_KERNEL_NAMES: [&str; 4] = [
    "ditto_attention_forward_f32",
    "ditto_attention_row_dot_f32",
    "ditto_attention_backward_dq_f32",
    "ditto_attention_backward_dkv_f32",
];

/// `attention.cu` with its headers inlined.
#[must_use]
pub fn attention_translation_unit() -> String {
    tensor_core::cuda_source::inline_includes(ATTENTION_CU, &HEADERS)
}

/// `random.cu` with its headers inlined (see [`tensor_core::cuda_source`]).
#[must_use]
pub fn translation_unit() -> String {
    tensor_core::cuda_source::inline_includes(RANDOM_CU, &HEADERS)
}

/// A downstream kernel source `cu` as one translation unit: ditto's headers ([`HEADERS`])
/// and the crate's own `headers` (pairs of the name it includes them by and their text)
/// inlined where they are included, each once.
///
/// ```
/// let own = [("my_op.cuh", "#include \"philox.cuh\"\n// my body")];
/// let tu = kernels::source::translation_unit_with("#include \"my_op.cuh\"\n", &own);
/// assert!(tu.contains("ditto_philox4x32_10") && tu.contains("// my body"));
/// ```
#[must_use]
pub fn translation_unit_with(cu: &str, headers: &[(&'static str, &'static str)]) -> String {
    let mut all: Vec<(&'static str, &'static str)> = headers.to_vec();
    all.extend(HEADERS);
    tensor_core::cuda_source::inline_includes(cu, &all)
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
        // The Philox rounds and the logarithm's body are stated once.
        assert_eq!(tu.matches("DITTO_HD void ditto_philox4x32_10").count(), 1);
        assert_eq!(tu.matches("float ditto_portable_log_reduced(").count(), 1);
        // portable_math.cuh includes the shim by its name beside it: still inlined once.
        assert_eq!(tu.matches("#define DITTO_HOST_DEVICE_CUH").count(), 1);
    }

    #[test]
    fn every_kernel_name_is_defined() {
        let tu = translation_unit();
        for name in KERNEL_NAMES {
            let direct = tu.contains(&format!("void {name}("));
            let via_macro = tu.contains(&format!("({name},"));
            assert!(direct || via_macro, "{name} is not in random.cu");
        }
        let attention = attention_translation_unit();
        assert!(
            !attention.contains("#include \""),
            "a local include was left"
        );
        for name in ATTENTION_KERNEL_NAMES {
            assert!(attention.contains(&format!("void {name}(")), "{name}");
        }
        let defined = attention.matches("__global__ void").count();
        assert_eq!(
            defined,
            ATTENTION_KERNEL_NAMES.len(),
            "a kernel is not listed"
        );
    }

    #[test]
    fn every_header_in_the_folder_is_embedded() {
        // A new .cuh must be added to HEADERS, or NVRTC would not find it.
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/cuda");
        for entry in std::fs::read_dir(dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".cuh") {
                assert!(HEADERS.iter().any(|(h, _)| *h == name), "{name}");
            }
        }
    }
}
