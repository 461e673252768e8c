//! The op's kernel compiles with NVRTC for sm_80 and sm_90 with ditto's options
//! (`--fmad=false`) and contains no fused or approximate float instruction, like
//! ditto's own kernels (`crates/kernels/tests/integration/nvrtc_compile.rs`). Without
//! NVRTC it prints why and passes, except under `CI=true`.
#![cfg(feature = "cuda")]

use ditto::tensor_core::cuda::nvrtc;
use gumbel_noise::gumbel::cuda::{translation_unit, SOURCE};

#[test]
fn the_gumbel_kernel_compiles_without_fma() {
    if let Err(e) = nvrtc::ensure_available() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true requires NVRTC: {e}"
        );
        println!("skipping: {e}");
        return;
    }
    for arch in ["sm_80", "sm_90"] {
        let ptx = nvrtc::compile(&translation_unit(), SOURCE.file_name, arch)
            .unwrap_or_else(|e| panic!("{arch}: {e}"))
            .to_src();
        assert!(ptx.contains(".entry example_gumbel_f32_kernel("), "{arch}");
        for forbidden in ["fma.", "mad.f32", ".approx", ".ftz"] {
            assert!(!ptx.contains(forbidden), "{arch}: PTX contains {forbidden}");
        }
    }
}
