//! Compiling CUDA sources with NVRTC, at run time, for the GPU at hand.
//!
//! Shared by every crate that ships kernels: tensor-core's own tensor ops
//! (`cuda/tensor_ops.cu`) and the random kernels of the `kernels` crate both go through
//! [`compile`] with the same options, and through [`crate::module_cache`].
//!
//! Why NVRTC and not a prebuilt fatbin: the build machines have no CUDA toolkit, and the
//! GPU machines have no Rust. NVRTC (a pip wheel, pinned to 13.0 because newer releases
//! emit PTX that 13.0 drivers reject) compiles the embedded sources on the GPU machine.
//!
//! Options that matter for bit-identical results: `--fmad=false` (no contraction of
//! `a * b + c` into fma, which would round differently from the host), and correctly
//! rounded division and square root (`--prec-div=true --prec-sqrt=true`, `--ftz=false`).
//! With `--fmad=false` NVRTC emits `mul.rn` / `add.rn`, which the driver's JIT may not
//! fuse either.
//!
//! cudarc panics when the NVRTC library is missing; every entry point here first checks
//! that it loads and returns [`NvrtcError::Unavailable`] otherwise.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions, Ptx};

use crate::NvrtcError;

/// Results of this module.
type Result<T> = std::result::Result<T, NvrtcError>;

/// Whether the NVRTC library can be loaded (probed once per process).
fn library_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to open the library; no symbol is called.
    *PRESENT.get_or_init(|| unsafe { cudarc::nvrtc::sys::is_culib_present() })
}

/// Ok when NVRTC can be used; otherwise the typed error with what was searched for.
pub fn ensure_available() -> Result<()> {
    if library_present() {
        Ok(())
    } else {
        Err(NvrtcError::Unavailable(
            "searched for libnvrtc.so / libnvrtc.so.13 on the library path".into(),
        ))
    }
}

/// Runs a cudarc NVRTC call that could panic on a half-installed library (a missing
/// symbol), turning the panic into `NvrtcError::Unavailable`.
fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    ensure_available()?;
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(NvrtcError::Unavailable(
            "the NVRTC library is present but could not be used (a symbol is missing?)".into(),
        ))
    })
}

/// NVRTC's version as (major, minor), e.g. (13, 0).
pub fn version() -> Result<(i32, i32)> {
    guarded(|| {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: both pointers are valid for writes; the library is loaded.
        let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
        status
            .result()
            .map_err(|e| NvrtcError::Unavailable(format!("nvrtcVersion failed: {e:?}")))?;
        Ok((major, minor))
    })
}

/// The compute capabilities this NVRTC can target, as numbers like 80 or 90.
pub fn supported_archs() -> Result<Vec<i32>> {
    guarded(|| {
        let fail = |e| NvrtcError::Unavailable(format!("nvrtcGetSupportedArchs: {e:?}"));
        let mut count = 0;
        // SAFETY: valid out-pointer; the library is loaded.
        unsafe { cudarc::nvrtc::sys::nvrtcGetNumSupportedArchs(&mut count) }
            .result()
            .map_err(fail)?;
        let mut archs = vec![0; usize::try_from(count).unwrap_or(0)];
        // SAFETY: `archs` has room for `count` entries, as NVRTC just reported.
        unsafe { cudarc::nvrtc::sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }
            .result()
            .map_err(fail)?;
        Ok(archs)
    })
}

/// The NVRTC options ditto compiles with for `arch` (`sm_90`, `compute_90`, ...);
/// `file_name` names the source in NVRTC's messages.
#[must_use]
pub fn compile_options(arch: &str, file_name: &str) -> CompileOptions {
    CompileOptions {
        fmad: Some(false),
        ftz: Some(false),
        prec_div: Some(true),
        prec_sqrt: Some(true),
        use_fast_math: Some(false),
        options: vec![
            format!("--gpu-architecture={arch}"),
            "-default-device".into(),
            "--std=c++17".into(),
        ],
        name: Some(file_name.into()),
        ..CompileOptions::default()
    }
}

/// Compiles one translation unit (`source`, called `file_name` in messages) for `arch`
/// and returns the PTX.
pub fn compile(source: &str, file_name: &str, arch: &str) -> Result<Ptx> {
    guarded(|| {
        compile_ptx_with_opts(source, compile_options(arch, file_name)).map_err(|e| {
            let log = match e {
                CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
                other => format!("{other:?}"),
            };
            NvrtcError::Compile {
                module: file_name.to_string(),
                arch: arch.to_string(),
                log,
            }
        })
    })
}

/// The virtual architecture to compile for on a device of compute capability
/// `(major, minor)`: `compute_<cc>` when this NVRTC knows it, else the newest it knows
/// below it (the driver JIT-compiles PTX forward). PTX rather than a cubin keeps the
/// driver, not NVRTC, responsible for the final machine code of that exact GPU.
pub fn arch_for(major: i32, minor: i32) -> Result<String> {
    let cc = major * 10 + minor;
    let supported = supported_archs()?;
    let best = supported
        .iter()
        .copied()
        .filter(|&a| a <= cc)
        .max()
        .ok_or_else(|| NvrtcError::Compile {
            module: "(any)".into(),
            arch: format!("compute_{cc}"),
            log: format!("this NVRTC supports {supported:?}, none at or below {cc}"),
        })?;
    Ok(format!("compute_{best}"))
}
