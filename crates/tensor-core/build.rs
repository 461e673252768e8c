//! Publishes the folder of tensor-core's CUDA headers to crates that depend on it
//! (`links = "ditto_tensor_core"`: their build scripts read `DEP_DITTO_TENSOR_CORE_INCLUDE`;
//! the `kernels` crate passes it on with its own folder), and with the `host-parity`
//! feature compiles the tensor-op kernel bodies (`cuda/tensor_ops.cuh`) as plain C++
//! through `host/tensor_ops_shim.cpp`, so tests can run the code the GPU runs on the host
//! and compare it with the CPU ops (docs/contract.md §11). Without the feature no C++
//! compiler is needed. The compiler flags are `ditto_build::host_cuda_build`'s, shared
//! with the kernels crate.

use std::path::PathBuf;

fn main() {
    let cuda_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("cuda");
    println!("cargo:include={}", cuda_dir.display());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=host/tensor_ops_shim.cpp");
    println!("cargo:rerun-if-changed=host/transformer_shim.cpp");
    ditto_build::rerun_if_headers_change(&cuda_dir);
    if std::env::var_os("CARGO_FEATURE_HOST_PARITY").is_none() {
        return;
    }
    ditto_build::host_cuda_build(&[cuda_dir])
        .file("host/tensor_ops_shim.cpp")
        .file("host/transformer_shim.cpp")
        .compile("ditto_tensor_ops_shim");
}
