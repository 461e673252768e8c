//! cuBLAS handles, one per device and math mode, made on first use with ditto's settings
//! and one fixed workspace each, so eager and graph-captured products choose the same
//! algorithm.
//!
//! - [`handle`]: pedantic math, for f32 and f64 products: they never use TF32 (not even
//!   under `NVIDIA_TF32_OVERRIDE`), so their bits are the same run to run.
//! - [`tensor_op_handle`]: cuBLAS's default math, for bf16 autocast's products (bf16
//!   operands, f32 sums): pedantic math asks for the prescribed precision in every phase,
//!   which keeps those products off the bf16 tensor cores they exist for. cuBLAS's
//!   default math is still reproducible run to run on one GPU model (its documented
//!   promise for a fixed toolkit, architecture and SM count), which is all default-mode
//!   arithmetic promises (docs/contract.md §11, §14.1).

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::cublas::sys::cublasMath_t;
use cudarc::cublas::CudaBlas;
use cudarc::driver::CudaSlice;

use crate::{CudaError, Result};

/// The bytes of cuBLAS's workspace on each device, set once with the handle
/// (`cublasSetWorkspace`): NVIDIA's recommendation for Hopper, more than older GPUs use.
///
/// Why ditto sets one: without it, cuBLAS 12.2 and later allocate their own with
/// `cudaMallocAsync` when a gemm is captured, which the graph records as an allocation
/// it never frees, so the graph could not be launched twice (PyTorch #113994); and a
/// workspace of another size can make cuBLAS choose another algorithm, so eager and
/// graphed products could differ in their bits. One workspace, set before any capture,
/// serves both.
pub const WORKSPACE_BYTES: usize = 32 << 20;

/// The pedantic-math cuBLAS handle of device `ordinal` and its workspace, created on
/// first use. Errors (never panics) when libcublas cannot be loaded.
pub fn handle(ordinal: usize) -> Result<Arc<CudaBlas>> {
    handle_in(ordinal, cublasMath_t::CUBLAS_PEDANTIC_MATH)
}

/// The default-math (tensor core) cuBLAS handle of device `ordinal`, for bf16 products;
/// its own workspace, created on first use (a run that never multiplies in bf16 never
/// makes it).
pub fn tensor_op_handle(ordinal: usize) -> Result<Arc<CudaBlas>> {
    handle_in(ordinal, cublasMath_t::CUBLAS_DEFAULT_MATH)
}

fn handle_in(ordinal: usize, math: cublasMath_t) -> Result<Arc<CudaBlas>> {
    type Handles = HashMap<(usize, u32), (Arc<CudaBlas>, CudaSlice<u8>)>;
    static HANDLES: OnceLock<Mutex<Handles>> = OnceLock::new();
    let handles = HANDLES.get_or_init(|| Mutex::new(HashMap::new()));
    // A panic while holding the lock cannot leave the map half-updated (one insert).
    let mut map = handles.lock().unwrap_or_else(|p| p.into_inner());
    let key = (ordinal, math as u32);
    if let Some((h, _)) = map.get(&key) {
        return Ok(h.clone());
    }
    let stream = crate::default_stream(ordinal)?;
    // SAFETY: only tries to open the library; no symbol is called.
    if !unsafe { cudarc::cublas::sys::is_culib_present() } {
        return Err(CudaError::Unavailable {
            ordinal,
            reason: "no cuBLAS library found (libcublas.so.13): matmul on CUDA needs it; \
                     install nvidia-cublas for CUDA 13 and add it to LD_LIBRARY_PATH"
                .into(),
        });
    }
    // Fresh driver memory (never a block a capture in progress writes), kept for the
    // process with the handle.
    let workspace = crate::allocator::allocate_uncached(ordinal, WORKSPACE_BYTES)?;
    let created = catch_unwind(AssertUnwindSafe(|| {
        let blas = CudaBlas::new(stream.clone()).map_err(|e| format!("{e:?}"))?;
        // SAFETY: a valid handle just created; the mode is a plain enum value.
        unsafe { cudarc::cublas::sys::cublasSetMathMode(*blas.handle(), math) }
            .result()
            .map_err(|e| format!("cublasSetMathMode: {e:?}"))?;
        use cudarc::driver::DevicePtr;
        let (ptr, _sync) = workspace.device_ptr(&stream);
        // SAFETY: a valid handle; `ptr` is WORKSPACE_BYTES of device memory of the
        // handle's device, alive as long as the handle (both kept in HANDLES).
        unsafe {
            cudarc::cublas::sys::cublasSetWorkspace_v2(
                *blas.handle(),
                ptr as *mut std::ffi::c_void,
                WORKSPACE_BYTES,
            )
        }
        .result()
        .map_err(|e| format!("cublasSetWorkspace_v2: {e:?}"))?;
        Ok::<_, String>(blas)
    }))
    .unwrap_or_else(|_| Err("libcublas is present but could not be used".into()))
    .map_err(|message| CudaError::Driver {
        ordinal,
        op: "cublas handle",
        message,
    })?;
    let created = Arc::new(created);
    map.insert(key, (created.clone(), workspace));
    Ok(created)
}
