//! With the `host-parity` feature, compiles the CUDA headers as plain C++ (through
//! `host/parity_shim.cpp`) so tests can run the very code the GPU runs on the host and
//! compare it with the Rust engine bit for bit (DESIGN.md §3). Without the feature this
//! does nothing: normal builds need no C++ compiler.
//!
//! The flags keep the host's float arithmetic as literal as NVRTC's `--fmad=false`: no
//! contraction into fma, no fast-math reassociation, no library substitutions.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=host/parity_shim.cpp");
    for header in [
        "ditto_types.cuh",
        "philox.cuh",
        "ditto_math.cuh",
        "random_blocks.cuh",
    ] {
        println!("cargo:rerun-if-changed=cuda/{header}");
    }
    if std::env::var_os("CARGO_FEATURE_HOST_PARITY").is_none() {
        return;
    }
    cc::Build::new()
        .cpp(true)
        .file("host/parity_shim.cpp")
        .include("cuda")
        .opt_level(2)
        .flag("-std=c++17")
        .flag("-ffp-contract=off")
        .flag("-fno-fast-math")
        .flag("-fno-builtin")
        .warnings(true)
        .extra_warnings(true)
        .compile("ditto_parity_shim");
}
