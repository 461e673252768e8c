//! # ditto-build: compiling CUDA sources as host C++, for build scripts
//!
//! ditto checks its CUDA code without a GPU by compiling the `__host__ __device__`
//! bodies of its kernels with the host C++ compiler and comparing them with the Rust
//! code bit for bit ("host parity", docs/contract.md §11). Two of ditto's own crates do
//! that (tensor-core for the tensor ops, kernels for the random ops), and so can a
//! downstream crate that writes its own random op with a CUDA body
//! (docs/custom-random-op.md). They all call [`host_cuda_build`], so the compiler flags
//! that make host floats behave like NVRTC's `--fmad=false` are written once:
//!
//! ```no_run
//! // build.rs of a crate whose host/shim.cpp includes its own op.cuh and ditto's headers
//! let include = ditto_build::ditto_include_dirs().expect("depend on `kernels` directly");
//! ditto_build::host_cuda_build(&include)
//!     .file("host/shim.cpp")
//!     .include("cuda")
//!     .compile("my_op_host");
//! ```
//!
//! Nothing here needs CUDA or a GPU; a C++17 compiler is enough.

#![warn(missing_docs)]

use std::path::{Path, PathBuf};

/// A `cc` C++ build with the flags every host-parity build of CUDA code uses, and
/// `include_dirs` on the include path. Add files and your own include folders, then
/// `compile`.
///
/// Why these flags: the kernels are compiled by NVRTC with `--fmad=false`, so every
/// float multiply and add is a separate, correctly rounded operation. On the host,
/// `-ffp-contract=off` keeps the compiler from fusing `a * b + c` into an fma,
/// `-fno-fast-math` from reassociating, and `-fno-builtin` from substituting library
/// calls, so the host build computes exactly what the GPU computes (and what Rust
/// computes: Rust never contracts either). x86-64 floats are SSE, never x87; the shims
/// assert `FLT_EVAL_METHOD == 0`.
#[must_use]
pub fn host_cuda_build<P: AsRef<Path>>(include_dirs: &[P]) -> cc::Build {
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .opt_level(2)
        .flag("-std=c++17")
        .flag("-ffp-contract=off")
        .flag("-fno-fast-math")
        .flag("-fno-builtin")
        .warnings(true)
        .extra_warnings(true);
    for dir in include_dirs {
        build.include(dir.as_ref());
    }
    build
}

/// The folders holding ditto's CUDA headers (`philox.cuh`, `ditto_math.cuh`,
/// `random_blocks.cuh`, and the host/device shim they include), read from the
/// `DEP_DITTO_KERNELS_INCLUDE` variable Cargo sets for build scripts of crates that
/// depend on `kernels` *directly* (kernels declares `links = "ditto_kernels"` and
/// publishes the folders). `None` when the variable is absent: add `kernels` to the
/// crate's `[dependencies]`.
///
/// Also prints `cargo:rerun-if-changed` for every header found, so edits to ditto's
/// headers rebuild the host code.
#[must_use]
pub fn ditto_include_dirs() -> Option<Vec<PathBuf>> {
    let joined = std::env::var_os("DEP_DITTO_KERNELS_INCLUDE")?;
    let dirs: Vec<PathBuf> = std::env::split_paths(&joined).collect();
    for dir in &dirs {
        rerun_if_headers_change(dir);
    }
    Some(dirs)
}

/// Prints `cargo:rerun-if-changed` for every `.cuh`, `.cu` and `.h` file in `dir` (not
/// recursive), so a build script reruns when one of them changes.
pub fn rerun_if_headers_change(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_source = path
            .extension()
            .is_some_and(|e| e == "cuh" || e == "cu" || e == "h");
        if is_source {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
