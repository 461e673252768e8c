//! Publishes the folders of ditto's CUDA headers to crates that depend on `kernels`
//! (`links = "ditto_kernels"`: their build scripts read `DEP_DITTO_KERNELS_INCLUDE`, see
//! `ditto_build::ditto_include_dirs`), and with the `host-parity` feature compiles the
//! headers as plain C++ through `host/parity_shim.cpp`, so tests can run the very code
//! the GPU runs on the host and compare it with the Rust engine bit for bit
//! (docs/contract.md §11). Without the feature no C++ compiler is needed. The compiler
//! flags are `ditto_build::host_cuda_build`'s, shared with tensor-core.

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
    println!("cargo:rerun-if-changed=host/parity_shim.cpp");
    for folder in &folders {
        ditto_build::rerun_if_headers_change(folder);
    }
    if std::env::var_os("CARGO_FEATURE_HOST_PARITY").is_none() {
        return;
    }
    ditto_build::host_cuda_build(&folders)
        .file("host/parity_shim.cpp")
        .compile("ditto_parity_shim");
}
