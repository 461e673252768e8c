//! Compiling ditto's random kernels with NVRTC.
//!
//! The NVRTC plumbing (library probe, options, architecture choice) lives in
//! [`cuda_runtime::nvrtc`], shared with tensor-core's own kernels; this module
//! names the translation unit that holds the random kernels ([`RANDOM_SOURCE`]) and
//! reports failures as [`KernelError`](crate::KernelError)s.

use cuda_runtime::{nvrtc as shared, CudaSource};
use cudarc::nvrtc::{CompileOptions, Ptx};

use crate::error::Result;
use crate::source::{attention_translation_unit, translation_unit};

/// The random kernels' translation unit, as the module cache knows it.
pub static RANDOM_SOURCE: CudaSource = CudaSource {
    file_name: "ditto_random.cu",
    text: translation_unit,
};

/// The fused attention kernels' translation unit (`cuda/attention.cu`).
pub static ATTENTION_SOURCE: CudaSource = CudaSource {
    file_name: "ditto_attention.cu",
    text: attention_translation_unit,
};

/// Ok when NVRTC can be used; otherwise the typed error with what was searched for.
pub fn ensure_available() -> Result<()> {
    Ok(shared::ensure_available()?)
}

/// NVRTC's version as (major, minor), e.g. (13, 0).
pub fn version() -> Result<(i32, i32)> {
    Ok(shared::version()?)
}

/// The compute capabilities this NVRTC can target, as numbers like 80 or 90.
pub fn supported_archs() -> Result<Vec<i32>> {
    Ok(shared::supported_archs()?)
}

/// The NVRTC options the random kernels are compiled with for `arch`.
#[must_use]
pub fn compile_options(arch: &str) -> CompileOptions {
    shared::compile_options(arch, RANDOM_SOURCE.file_name)
}

/// Compiles every random kernel for `arch` and returns the PTX.
pub fn compile(arch: &str) -> Result<Ptx> {
    Ok(shared::compile(
        &translation_unit(),
        RANDOM_SOURCE.file_name,
        arch,
    )?)
}

/// The virtual architecture to compile for on a device of compute capability
/// `(major, minor)`; see [`cuda_runtime::nvrtc::arch_for`].
pub fn arch_for(major: i32, minor: i32) -> Result<String> {
    Ok(shared::arch_for(major, minor)?)
}
