//! Publishes the folder of tensor-core's CUDA headers to crates that depend on it
//! (`links = "ditto_tensor_core"`: their build scripts read `DEP_DITTO_TENSOR_CORE_INCLUDE`;
//! the `kernels` crate passes it on with its own folder). The tests' host builds of these
//! headers are the `host-parity` test crate's (`tests/host-parity`); no C++ compiler is
//! needed here.

use std::path::PathBuf;

fn main() {
    let cuda_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("cuda");
    println!("cargo:include={}", cuda_dir.display());
    println!("cargo:rerun-if-changed=build.rs");
    ditto_build::rerun_if_headers_change(&cuda_dir);
}
