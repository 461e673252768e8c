//! Publishes the folders of ditto's CUDA headers to crates that depend on `kernels`
//! (`links = "ditto_kernels"`: their build scripts read `DEP_DITTO_KERNELS_INCLUDE`, see
//! `ditto_build::ditto_include_dirs`). The tests' host builds of these headers are the
//! `host-parity` test crate's (`tests/host-parity`, docs/contract.md §11); no C++
//! compiler is needed here.

use std::path::PathBuf;

fn main() {
    let cuda_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("cuda");
    // tensor-core's folder (the host/device shim) travels with ours.
    let mut folders = vec![cuda_dir.clone()];
    if let Some(core) = std::env::var_os("DEP_DITTO_TENSOR_CORE_INCLUDE") {
        folders.push(PathBuf::from(core));
    }
    let joined = std::env::join_paths(&folders).expect("include folders without separators");
    println!("cargo:include={}", joined.to_string_lossy());
    println!("cargo:rerun-if-changed=build.rs");
    for folder in &folders {
        ditto_build::rerun_if_headers_change(folder);
    }
}
