//! Compiled modules, one per (device, source), built on first use and kept for the
//! process.
//!
//! Compiling takes NVRTC a second or so, so it happens once per device (devices of
//! different compute capability need different code) and per source, under a lock so two
//! threads asking at once do not compile twice. Crates that ship kernels describe their
//! source with a [`CudaSource`] and ask for functions by name.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaFunction, CudaModule};

use super::{context, driver_error, nvrtc};
use crate::Result;

/// A CUDA translation unit that ditto compiles at run time.
#[derive(Debug)]
pub struct CudaSource {
    /// The file name NVRTC reports in its messages; also the cache key, so it must be
    /// unique per source (e.g. `ditto_random.cu`, `ditto_tensor_ops.cu`).
    pub file_name: &'static str,
    /// Produces the full text (headers already inlined).
    pub text: fn() -> String,
}

type Key = (usize, &'static str);

fn module(ordinal: usize, source: &CudaSource) -> Result<Arc<CudaModule>> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Arc<CudaModule>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    // A panic while holding the lock cannot leave the map half-updated (one insert).
    let mut map = cache.lock().unwrap_or_else(|p| p.into_inner());
    let key = (ordinal, source.file_name);
    if let Some(m) = map.get(&key) {
        return Ok(m.clone());
    }
    // Context first: without a driver or device this is the error the user should see.
    let context = context(ordinal)?;
    let (major, minor) = context
        .compute_capability()
        .map_err(driver_error(ordinal, "compute_capability"))?;
    let arch = nvrtc::arch_for(major, minor)?;
    let ptx = nvrtc::compile(&(source.text)(), source.file_name, &arch)?;
    let loaded = context
        .load_module(ptx)
        .map_err(driver_error(ordinal, "load module"))?;
    map.insert(key, loaded.clone());
    Ok(loaded)
}

/// The kernel `name` of `source` on device `ordinal`, compiling the source first if
/// this device has not used it yet.
pub fn function(ordinal: usize, source: &CudaSource, name: &str) -> Result<CudaFunction> {
    module(ordinal, source)?
        .load_function(name)
        .map_err(|e| crate::TensorError::Cuda {
            ordinal,
            op: "load kernel",
            message: format!("{name}: {e}"),
        })
}
