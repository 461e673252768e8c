//! Compiles ditto's CUDA kernel bodies as plain C++ through the shims in `host/`: the
//! tensor ops (`tensor_ops.cuh`, `transformer_ops.cuh`) and the random blocks
//! (`random_blocks.cuh`, `dropout.cuh`), with `ditto_build::host_cuda_build`'s flags (the
//! host computes what NVRTC's `--fmad=false` build computes). The header folders come
//! from the `kernels` crate (`DEP_DITTO_KERNELS_INCLUDE`, which carries tensor-core's
//! folder too), so this crate compiles the very files the GPU builds.

fn main() {
    let include = ditto_build::ditto_include_dirs()
        .expect("host-parity depends on `kernels` directly, which publishes the header folders");
    println!("cargo:rerun-if-changed=build.rs");
    for shim in ["tensor_ops_shim", "transformer_shim", "parity_shim"] {
        println!("cargo:rerun-if-changed=host/{shim}.cpp");
    }
    ditto_build::host_cuda_build(&include)
        .file("host/tensor_ops_shim.cpp")
        .file("host/transformer_shim.cpp")
        .file("host/parity_shim.cpp")
        .compile("ditto_host_parity");
}
