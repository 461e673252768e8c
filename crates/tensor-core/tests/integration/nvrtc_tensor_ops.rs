//! Compiles tensor-core's CUDA kernels (`cuda/tensor_ops.cu`) with the real NVRTC for
//! sm_80 and sm_90, with the options every ditto kernel uses (`--fmad=false`), and
//! checks that every kernel the Rust side launches is there.
//!
//! Needs libnvrtc (scripts/install_cuda_wheels.sh, then export the LD_LIBRARY_PATH it
//! prints). Without it the test prints why and passes, except under `CI=true`, where a
//! missing NVRTC is a failure (docs/contract.md §11).
#![cfg(feature = "cuda")]

use tensor_core::cuda::{nvrtc, TENSOR_OPS, TENSOR_OPS_KERNELS};

/// Whether NVRTC can be used here; without it, says why and skips, except under
/// `CI=true`, where it fails.
fn nvrtc_or_skip() -> bool {
    match nvrtc::ensure_available() {
        Ok(()) => true,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true requires NVRTC: {e}")
        }
        Err(e) => {
            println!("skipping: {e}");
            false
        }
    }
}

#[test]
fn tensor_ops_compile_for_sm80_and_sm90() {
    if !nvrtc_or_skip() {
        return;
    }
    let source = (TENSOR_OPS.text)();
    for arch in ["sm_80", "sm_90"] {
        let ptx = nvrtc::compile(&source, TENSOR_OPS.file_name, arch)
            .unwrap_or_else(|e| panic!("{e}"))
            .to_src();
        for name in TENSOR_OPS_KERNELS {
            assert!(
                ptx.contains(&format!(".entry {name}(")),
                "{arch}: no kernel {name}"
            );
        }
        let entries = ptx.matches(".entry ").count();
        assert_eq!(
            entries,
            TENSOR_OPS_KERNELS.len(),
            "{arch}: unlisted kernels"
        );
        // The kernels' own arithmetic is unfused (`--fmad=false`): adds and multiplies
        // are explicitly rounded instructions. (libdevice's exp / log / pow use fma
        // internally by design; that is deterministic too.)
        // The fast paths' atomics are real hardware atomics (red/atom .global.add).
        for required in [
            "add.rn.f64",
            "add.rn.f32",
            "mul.rn.f32",
            "div.rn.f32",
            ".global.add.f32",
            ".global.add.f64",
        ] {
            assert!(ptx.contains(required), "{arch}: PTX lacks {required}");
        }
        println!("{arch}: {entries} kernels, {} bytes of PTX", ptx.len());
    }
}

/// The portable matmul (`cuda/portable_matmul.cu`, docs/contract.md §14): its chains are
/// explicit round-to-nearest fused multiply-adds, and nothing else is fused, approximate
/// or flushing subnormals; its blocks synchronise through shared memory.
#[test]
fn the_portable_matmul_compiles_to_explicit_fmas() {
    if !nvrtc_or_skip() {
        return;
    }
    let source = (tensor_core::cuda::PORTABLE_MATMUL.text)();
    for arch in ["sm_80", "sm_90"] {
        let ptx = nvrtc::compile(&source, tensor_core::cuda::PORTABLE_MATMUL.file_name, arch)
            .unwrap_or_else(|e| panic!("{e}"))
            .to_src();
        assert_eq!(
            ptx.matches(".entry ").count(),
            2,
            "{arch}: the 2-D and the batched kernel"
        );
        assert!(ptx.contains(".entry ditto_portable_matmul_f32("), "{arch}");
        assert!(
            ptx.contains(".entry ditto_portable_matmul_batched_f32("),
            "{arch}"
        );
        for required in ["fma.rn.f32", "bar.sync", ".shared"] {
            assert!(ptx.contains(required), "{arch}: PTX lacks {required}");
        }
        for forbidden in ["mad.", ".approx", ".ftz", "mma", "wmma"] {
            assert!(!ptx.contains(forbidden), "{arch}: PTX has {forbidden}");
        }
    }
}

/// The block-per-row kernels (`cuda/row_ops.cu`): every one the Rust side launches is
/// there, nothing else, and their blocks synchronise through shared memory.
#[test]
fn the_row_kernels_compile_and_synchronise_their_blocks() {
    use tensor_core::cuda::{ROW_OPS, ROW_OPS_KERNELS};
    if !nvrtc_or_skip() {
        return;
    }
    let source = (ROW_OPS.text)();
    for arch in ["sm_80", "sm_90"] {
        let ptx = nvrtc::compile(&source, ROW_OPS.file_name, arch)
            .unwrap_or_else(|e| panic!("{e}"))
            .to_src();
        for name in ROW_OPS_KERNELS {
            assert!(
                ptx.contains(&format!(".entry {name}(")),
                "{arch}: no kernel {name}"
            );
        }
        assert_eq!(
            ptx.matches(".entry ").count(),
            ROW_OPS_KERNELS.len(),
            "{arch}: unlisted kernels"
        );
        for required in ["bar.sync", ".shared", "add.rn.f64", "div.rn.f64"] {
            assert!(ptx.contains(required), "{arch}: PTX lacks {required}");
        }
    }
}
