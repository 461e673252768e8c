//! One cuBLAS handle per device, made on first use with ditto's settings: pedantic math
//! (f32 products never use TF32, so cuBLAS's bits are the same run to run) and one fixed
//! workspace, so eager and graph-captured products choose the same algorithm.

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

/// The cuBLAS handle of device `ordinal` and its workspace, created on first use.
/// Errors (never panics) when libcublas cannot be loaded.
pub fn handle(ordinal: usize) -> Result<Arc<CudaBlas>> {
    type Handles = HashMap<usize, (Arc<CudaBlas>, CudaSlice<u8>)>;
    static HANDLES: OnceLock<Mutex<Handles>> = OnceLock::new();
    let handles = HANDLES.get_or_init(|| Mutex::new(HashMap::new()));
    // A panic while holding the lock cannot leave the map half-updated (one insert).
    let mut map = handles.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((h, _)) = map.get(&ordinal) {
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
        unsafe {
            cudarc::cublas::sys::cublasSetMathMode(
                *blas.handle(),
                cublasMath_t::CUBLAS_PEDANTIC_MATH,
            )
        }
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
    map.insert(ordinal, (created.clone(), workspace));
    Ok(created)
}
