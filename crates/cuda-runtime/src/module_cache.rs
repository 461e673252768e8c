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

use crate::registry::guarded;
use crate::{context, driver_error, nvrtc};
use crate::{CudaError, Result};

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
    let loaded = guarded(ordinal, || {
        context
            .load_module(ptx)
            .map_err(driver_error(ordinal, "load module"))
    })?;
    map.insert(key, loaded.clone());
    Ok(loaded)
}

/// Errors unless the driver can launch kernels: cudarc looks `cuLaunchKernel` up on
/// first use and panics if it is missing, and every function handed out here is about to
/// be launched, so a driver without it is refused now, with a typed error.
fn ensure_launchable(ordinal: usize) -> Result<()> {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only looks the symbol up in the already-loaded driver library; calls nothing.
    let present = *PRESENT.get_or_init(|| unsafe {
        cudarc::driver::sys::culib()
            .get::<unsafe extern "C" fn()>(b"cuLaunchKernel\0")
            .is_ok()
    });
    if present {
        Ok(())
    } else {
        Err(CudaError::Unavailable {
            ordinal,
            reason: "the CUDA driver library has no cuLaunchKernel (half-installed?)".into(),
        })
    }
}

/// The kernel `name` of `source` on device `ordinal`, compiling the source first if
/// this device has not used it yet. Handles are looked up in the driver once
/// (`cuModuleGetFunction`) and kept, like the modules: a training step launches dozens
/// of kernels, and a driver lookup before each launch is host time for nothing.
pub fn function(ordinal: usize, source: &CudaSource, name: &str) -> Result<CudaFunction> {
    type Functions = HashMap<Key, HashMap<String, CudaFunction>>;
    static FUNCTIONS: OnceLock<Mutex<Functions>> = OnceLock::new();
    let functions = FUNCTIONS.get_or_init(|| Mutex::new(HashMap::new()));
    let key = (ordinal, source.file_name);
    {
        // A panic while holding the lock cannot leave the map half-updated (one insert).
        let map = functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = map.get(&key).and_then(|by_name| by_name.get(name)) {
            return Ok(f.clone());
        }
    }
    let module = module(ordinal, source)?;
    ensure_launchable(ordinal)?;
    let loaded = guarded(ordinal, || {
        module.load_function(name).map_err(|e| CudaError::Driver {
            ordinal,
            op: "load kernel",
            message: format!("{name}: {e}"),
        })
    })?;
    let mut map = functions.lock().unwrap_or_else(|p| p.into_inner());
    map.entry(key)
        .or_default()
        .insert(name.to_string(), loaded.clone());
    Ok(loaded)
}
