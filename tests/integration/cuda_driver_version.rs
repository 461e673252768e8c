//! A driver older than ditto's CUDA libraries (issue 33, item 4): the CUDA 12 driver
//! line (535, 550, 570) cannot load the PTX ISA 9.0 that NVRTC 13 writes, nor run the
//! cu13 cuBLAS and NCCL. ditto reads the driver's version before its first context and
//! stops with one typed error naming both versions, instead of a failed launch later.
//!
//! The stand-in plays a CUDA 12.4 driver (DITTO_CUDA_STANDIN_DRIVER_VERSION): it reports
//! that version and, like the real one, refuses PTX newer than ISA 8.4, so the test also
//! shows what the check saves a user from. The driver library is loaded once per
//! process, so the checks run in a child with the variable set.

use crate::support;

use ditto::rng_gen::{self, RngError};
use ditto::tensor_core::cuda;
use ditto::tensor_core::cudarc::driver::sys::CUresult;
use ditto::tensor_core::cudarc::driver::CudaContext;
use ditto::tensor_core::cudarc::nvrtc::Ptx;
use ditto::tensor_core::{CudaError, DType, Device, Tensor, TensorError};
use support::{gpu, on_standin, run_test_in_child};

const CHILD: &str = "DITTO_CUDA_STANDIN_DRIVER_VERSION";

fn too_old(what: &str, error: &TensorError) {
    match error {
        TensorError::Cuda(CudaError::DriverTooOld {
            ordinal: 0,
            found: 12040,
            needed: 13000,
        }) => {}
        other => panic!("{what}: expected CudaError::DriverTooOld(12040 < 13000), got {other:?}"),
    }
    let text = error.to_string();
    assert!(
        text.contains("CUDA 12.4") && text.contains("CUDA 13.0"),
        "{what}: the message names both versions: {text}"
    );
}

/// What a process sees on a CUDA 12.4 driver.
fn cuda_12_checks() {
    assert_eq!(cuda::driver_version().unwrap(), 12040);
    const { assert!(cuda::MIN_DRIVER_VERSION > 12040) };
    // The devices are there; using one is the typed error, for tensors and random ops.
    assert!(cuda::is_available());
    too_old(
        "zeros on cuda:0",
        &Tensor::zeros(&[4], DType::F32, Device::Cuda(0)).unwrap_err(),
    );
    match rng_gen::rand(&[4], DType::F32, Device::Cuda(0), None) {
        Err(RngError::Tensor(e)) => too_old("rand on cuda:0", &e),
        other => panic!("rand on cuda:0: expected the typed error, got {other:?}"),
    }
    // Past ditto's check, straight to the driver: PTX ISA 9.0 (NVRTC 13's) is refused,
    // 8.4 loads. This is the failure the start-up check turns into a clear message.
    let context = CudaContext::new(0).unwrap();
    let load = |version: &str| {
        let text = format!(
            ".version {version}\n.target sm_90\n.address_size 64\n\n\
             .visible .entry ditto_version_probe()\n{{\n\tret;\n}}\n"
        );
        context
            .load_module(Ptx::from_src(text))
            .map(|_| ())
            .map_err(|e| e.0)
    };
    assert_eq!(
        load("9.0"),
        Err(CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
    );
    assert_eq!(load("8.4"), Ok(()));
}

#[test]
fn a_cuda_12_driver_is_one_typed_error_naming_both_versions() {
    if std::env::var_os(CHILD).is_some() {
        cuda_12_checks();
        return;
    }
    if !gpu() {
        return;
    }
    if !on_standin() {
        println!("skipping: the stand-in plays the old driver; this is a real GPU");
        return;
    }
    // The driver the parent runs on is new enough: its version passes the check.
    assert!(cuda::driver_version().unwrap() >= cuda::MIN_DRIVER_VERSION);
    let dir = std::env::var("DITTO_CUDA_STANDIN_DIR")
        .expect("DITTO_CUDA_STANDIN_DIR (cuda_standin.sh --print-env)");
    run_test_in_child(
        test_support::exact_name(
            module_path!(),
            "a_cuda_12_driver_is_one_typed_error_naming_both_versions",
        )
        .as_str(),
        &std::path::Path::new(&dir).join("lib"),
        (CHILD, "12.4"),
    );
}
