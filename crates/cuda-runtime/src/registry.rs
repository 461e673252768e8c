//! One CUDA context and one stream per device ordinal, created lazily and shared.
//!
//! Contexts are the device's primary context (what the CUDA runtime and PyTorch use), so
//! buffers made here interoperate with other libraries in the same process. The registry
//! lives for the whole process; contexts are never torn down.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaStream};

use crate::driver_error;
use crate::{CudaError, Result};

/// A device's context and the stream every ditto operation on it is issued to.
#[derive(Clone)]
struct Entry {
    context: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Streaming multiprocessors, read once: every kernel launch sizes its grid by it.
    sm_count: u32,
}

/// Whether the driver library (`libcuda.so` / `nvcuda.dll`) can be loaded; probed once.
fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to open the library; no symbol is called.
    *PRESENT.get_or_init(|| unsafe { cudarc::driver::sys::is_culib_present() })
}

/// Runs a cudarc call that could panic on a half-installed driver (a missing symbol),
/// turning the panic into [`CudaError::Unavailable`] (in the caller's error type, so a
/// crate above wraps its own driver calls the same way).
pub fn guarded<T, E: From<CudaError>>(
    ordinal: usize,
    f: impl FnOnce() -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    if !driver_present() {
        return Err(CudaError::Unavailable {
            ordinal,
            reason: "no CUDA driver found".into(),
        }
        .into());
    }
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(CudaError::Unavailable {
            ordinal,
            reason: "the CUDA driver library is present but could not be used".into(),
        }
        .into())
    })
}

/// Number of CUDA devices visible to this process: 0 without a driver (never panics).
/// Asked once (`cuInit`, `cuDeviceGetCount`) and remembered: the driver fixes the set of
/// visible devices at initialisation, and every random op checks its device against
/// this count, so asking the driver each time would cost two calls per op.
#[must_use]
pub fn device_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        guarded(0, || {
            CudaContext::device_count()
                .map(|n| usize::try_from(n).unwrap_or(0))
                .map_err(driver_error(0, "device_count"))
        })
        .unwrap_or(0)
    })
}

/// True when at least one CUDA device can be used; GPU tests skip when false.
#[must_use]
pub fn is_available() -> bool {
    device_count() > 0
}

/// The oldest driver ditto's CUDA libraries run on, as `cuDriverGetVersion` reports it:
/// CUDA 13.0. NVRTC 13 writes PTX ISA 9.0, which CUDA 12 drivers refuse to load, and the
/// cu13 cuBLAS and NCCL need the 580 driver line. Checked before the first context, so a
/// CUDA 12 driver is one typed error naming both versions instead of a failed launch.
pub const MIN_DRIVER_VERSION: i32 = 13000;

/// The CUDA version the installed driver supports (`cuDriverGetVersion`: 12040 = 12.4).
pub fn driver_version() -> Result<i32> {
    guarded(0, || {
        let mut version = 0;
        // SAFETY: the driver writes one int through a valid pointer.
        let status = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
        status
            .result()
            .map(|()| version)
            .map_err(driver_error(0, "driver version"))
    })
}

/// The registry entry for `ordinal`, creating the context on first use.
fn entry(ordinal: usize) -> Result<Entry> {
    static REGISTRY: OnceLock<Mutex<HashMap<usize, Entry>>> = OnceLock::new();
    let registry = REGISTRY.get_or_init(|| Mutex::new(HashMap::new()));
    // A panic while holding the lock cannot leave the map inconsistent (one insert).
    let mut map = registry.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = map.get(&ordinal) {
        return Ok(e.clone());
    }
    let count = device_count();
    if ordinal >= count {
        return Err(CudaError::Unavailable {
            ordinal,
            reason: if driver_present() {
                format!("{count} CUDA devices present")
            } else {
                "no CUDA driver found".into()
            },
        });
    }
    let found = driver_version()?;
    if found < MIN_DRIVER_VERSION {
        return Err(CudaError::DriverTooOld {
            ordinal,
            found,
            needed: MIN_DRIVER_VERSION,
        });
    }
    let created = guarded::<_, CudaError>(ordinal, || {
        let context = CudaContext::new(ordinal).map_err(driver_error(ordinal, "context"))?;
        // cudarc's event tracking records two events per buffer (created and destroyed
        // with it) so buffers can move between streams; ditto issues everything on this
        // device to one stream, where it buys nothing and costs driver calls per op.
        // SAFETY: no buffer of this context is ever used on a stream other than
        // `stream` (ditto creates no other), and it is switched off before the first.
        unsafe { context.disable_event_tracking() };
        // A stream of ditto's own rather than the context's NULL stream: the driver
        // cannot capture the legacy NULL stream into a CUDA graph (`super::graph`).
        let stream = context
            .new_stream()
            .map_err(driver_error(ordinal, "stream"))?;
        let sm_count = context
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map(|n| u32::try_from(n).unwrap_or(1).max(1))
            .map_err(driver_error(ordinal, "multiprocessor count"))?;
        Ok(Entry {
            context,
            stream,
            sm_count,
        })
    })?;
    map.insert(ordinal, created.clone());
    Ok(created)
}

/// The shared context of CUDA device `ordinal`, created once on first use. Errors with
/// `CudaError::Unavailable` when there is no driver or no such device.
pub fn context(ordinal: usize) -> Result<Arc<CudaContext>> {
    Ok(entry(ordinal)?.context)
}

/// The stream all of ditto's work on device `ordinal` is issued to (one stream ditto
/// creates per device, so it can be captured into a CUDA graph), so operations are
/// ordered without extra synchronisation.
pub fn default_stream(ordinal: usize) -> Result<Arc<CudaStream>> {
    Ok(entry(ordinal)?.stream)
}

/// Blocks until all work queued on device `ordinal` has finished.
pub fn synchronize(ordinal: usize) -> Result<()> {
    crate::capture_state::refuse_during_capture(ordinal, "synchronize")?;
    let context = context(ordinal)?;
    guarded(ordinal, || {
        context
            .synchronize()
            .map_err(driver_error(ordinal, "synchronize"))
    })
}

/// The name the driver gives device `ordinal` (`torch.cuda.get_device_name`), e.g.
/// "NVIDIA H100 80GB HBM3", or "CUDA stand-in (host-executed) #0 (132 SMs)" when the
/// host-executed stand-in (scripts/cuda_standin.sh) plays the driver.
pub fn get_device_name(ordinal: usize) -> Result<String> {
    let context = context(ordinal)?;
    guarded(ordinal, || {
        context.name().map_err(driver_error(ordinal, "device name"))
    })
}

/// Streaming multiprocessors on device `ordinal`, for sizing launch grids.
pub fn sm_count(ordinal: usize) -> Result<u32> {
    Ok(entry(ordinal)?.sm_count)
}
