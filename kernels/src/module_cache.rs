//! One compiled module per CUDA device, built on first use and kept for the process.
//!
//! Compiling takes NVRTC a second or so, so it happens once per device (devices of
//! different compute capability need different code), under a lock so two threads
//! asking at once do not compile twice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaFunction, CudaModule};

use crate::error::{KernelError, Result};
use crate::nvrtc;

/// What we keep per device: its module and its SM count (for launch configs).
#[derive(Clone)]
struct DeviceKernels {
    module: Arc<CudaModule>,
    sm_count: u32,
}

fn launch_error(
    ordinal: usize,
    kernel: &str,
) -> impl FnOnce(cudarc::driver::DriverError) -> KernelError + '_ {
    move |e| KernelError::Launch {
        ordinal,
        kernel: kernel.to_string(),
        message: e.to_string(),
    }
}

fn device_kernels(ordinal: usize) -> Result<DeviceKernels> {
    static CACHE: OnceLock<Mutex<HashMap<usize, DeviceKernels>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    // A panic while holding the lock cannot leave the map half-updated (one insert).
    let mut map = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(k) = map.get(&ordinal) {
        return Ok(k.clone());
    }
    // Context first: without a driver or device this is the error the user should see.
    let context = tensor_core::cuda::context(ordinal)?;
    let (major, minor) = context
        .compute_capability()
        .map_err(launch_error(ordinal, "compute_capability"))?;
    let sm_count = context
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(launch_error(ordinal, "multiprocessor count"))?;
    let arch = nvrtc::arch_for(major, minor)?;
    let ptx = nvrtc::compile(&arch)?;
    let module = context
        .load_module(ptx)
        .map_err(launch_error(ordinal, "module"))?;
    let kernels = DeviceKernels {
        module,
        sm_count: u32::try_from(sm_count).unwrap_or(1).max(1),
    };
    map.insert(ordinal, kernels.clone());
    Ok(kernels)
}

/// The kernel `name` on device `ordinal`, compiling the module first if needed.
pub fn function(ordinal: usize, name: &str) -> Result<CudaFunction> {
    device_kernels(ordinal)?
        .module
        .load_function(name)
        .map_err(launch_error(ordinal, name))
}

/// Streaming multiprocessors on device `ordinal` (compiles the module if needed).
pub fn sm_count(ordinal: usize) -> Result<u32> {
    Ok(device_kernels(ordinal)?.sm_count)
}
