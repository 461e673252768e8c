//! With the `host-parity` feature, compiles the tensor-op kernel bodies
//! (`cuda/tensor_ops.cuh`) as plain C++ through `host/tensor_ops_shim.cpp`, so tests can
//! run the code the GPU runs on the host and compare it with the CPU ops (DESIGN.md §3).
//! Without the feature this does nothing: normal builds need no C++ compiler.
//!
//! The flags keep the host's float arithmetic as literal as NVRTC's `--fmad=false`: no
//! contraction into fma, no fast-math reassociation, no library substitutions.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=host/tensor_ops_shim.cpp");
    println!("cargo:rerun-if-changed=cuda/tensor_ops.cuh");
    if std::env::var_os("CARGO_FEATURE_HOST_PARITY").is_none() {
        return;
    }
    cc::Build::new()
        .cpp(true)
        .file("host/tensor_ops_shim.cpp")
        .include("cuda")
        .opt_level(2)
        .flag("-std=c++17")
        .flag("-ffp-contract=off")
        .flag("-fno-fast-math")
        .flag("-fno-builtin")
        .warnings(true)
        .extra_warnings(true)
        .compile("ditto_tensor_ops_shim");
}
