//! Compiles the op's CUDA body (`gumbel.cuh`) with the host C++ compiler, so the tests
//! can compare it with the Rust body bit for bit without a GPU. ditto's headers come
//! from the `kernels` dependency; the flags from `ditto_build::host_cuda_build`, the
//! same ones ditto's own host-parity builds use.

fn main() {
    let mut include = ditto_build::ditto_include_dirs()
        .expect("DEP_DITTO_KERNELS_INCLUDE is set for crates that depend on `kernels` directly");
    include.push("../custom_random_op".into());
    println!("cargo:rerun-if-changed=host/gumbel_host.cpp");
    println!("cargo:rerun-if-changed=../custom_random_op/gumbel.cuh");
    ditto_build::host_cuda_build(&include)
        .file("host/gumbel_host.cpp")
        .compile("gumbel_host");
}
