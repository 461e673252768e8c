//! The CUDA stand-in (host-executed) runs host builds of the kernels, made when
//! `scripts/cuda_standin.sh` last ran, while ditto compiles the kernel sources it was
//! built with through NVRTC. A kernel edited after the stand-in was built must therefore
//! stop every module load with a message that says to rebuild it: running the old host
//! build would let GPU tests pass or fail on code that no longer exists.
//!
//! The check reads `kernel_sources.txt` beside the library. Each case here runs in a
//! child process (the driver is loaded once per process) whose library path starts at a
//! copy of the stand-in's folder with a manifest this test writes, listing one file of
//! its own. Stand-in only: on a real GPU the test skips.

use crate::support;

use std::path::Path;
use std::process::Command;

use ditto::rng_gen;
use ditto::tensor_core::{DType, Device};
use support::{gpu, on_standin, run_test_in_child, STANDIN_LABEL};

/// Set in the child: what its module load must do ("load", or the expected message).
const CHILD: &str = "DITTO_TEST_FRESHNESS_CHILD";
const TEST: &str = "standin_refuses_to_run_kernels_built_from_changed_sources";

/// The child's side: a random op on `cuda:0` loads the random kernels' module.
fn child(expect: &str) {
    let result = rng_gen::rand(&[4], DType::F32, Device::Cuda(0), None);
    if expect == "load" {
        result.expect("the manifest matches its files, so the module must load");
    } else {
        let error = result.expect_err("a changed kernel source must stop the module load");
        let text = error.to_string();
        assert!(text.contains(expect), "expected {expect:?} in: {text}");
        assert!(
            text.contains("scripts/cuda_standin.sh"),
            "no rebuild advice in: {text}"
        );
    }
}

/// Copies the stand-in's library folder (files and the symlinks of its sonames) to `to`.
fn copy_library_folder(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_symlink() {
            let link = std::fs::read_link(entry.path()).unwrap();
            std::os::unix::fs::symlink(link, target).unwrap();
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Writes the manifest of `lib` for `source` with the build's own tool (generate.py), so
/// the format and the hash are the ones the real build writes.
fn write_manifest(lib: &Path, source: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/cuda-standin/generate.py");
    let status = Command::new("python3")
        .arg(script)
        .arg("manifest")
        .arg(lib.join("kernel_sources.txt"))
        .arg(source)
        .status()
        .expect("python3 (the stand-in's build needs it too)");
    assert!(status.success());
}

#[test]
fn standin_refuses_to_run_kernels_built_from_changed_sources() {
    if let Ok(expect) = std::env::var(CHILD) {
        child(&expect);
        return;
    }
    if !gpu() {
        return;
    }
    if !on_standin() {
        println!("skipping: the freshness check belongs to the {STANDIN_LABEL}");
        return;
    }
    let built = std::env::var("DITTO_CUDA_STANDIN_DIR")
        .expect("DITTO_CUDA_STANDIN_DIR (cuda_standin.sh --print-env)");
    let scratch = tempfile::tempdir().unwrap();
    let lib = scratch.path().join("lib");
    copy_library_folder(&Path::new(&built).join("lib"), &lib);
    let source = scratch.path().join("kernel.cu");
    std::fs::write(&source, "extern \"C\" __global__ void k() {}\n").unwrap();
    write_manifest(&lib, &source);

    // Unchanged: the module loads (so the refusals below come from the check).
    run_test_in_child(
        &test_support::exact_name(module_path!(), TEST),
        &lib,
        (CHILD, "load"),
    );
    // Edited after the build.
    std::fs::write(
        &source,
        "extern \"C\" __global__ void k() { /* edited */ }\n",
    )
    .unwrap();
    run_test_in_child(
        &test_support::exact_name(module_path!(), TEST),
        &lib,
        (CHILD, "kernel.cu changed since the stand-in was built"),
    );
    // Deleted after the build.
    std::fs::remove_file(&source).unwrap();
    run_test_in_child(
        &test_support::exact_name(module_path!(), TEST),
        &lib,
        (
            CHILD,
            "kernel.cu was deleted (or cannot be read) since the stand-in was built",
        ),
    );
}
