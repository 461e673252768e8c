//! CUDA graphs: record the work a region of code queues on a device once, then replay
//! it with one driver call (`torch.cuda.CUDAGraph`).
//!
//! Why: a small model's training step is bound by host work per op (argument checks,
//! one `cuLaunchKernel` each). A replay is one `cuGraphLaunch` for the whole step.
//!
//! How (PyTorch's rules, made typed errors here):
//! - The region runs once, on the capturing thread, with the device's stream in capture
//!   mode: kernels, memsets and device-to-device copies are recorded, not run. Copies to
//!   or from the host and waiting for the device cannot be part of a graph (the host
//!   side would happen once, at capture), so inside a capture they are
//!   [`CudaError::Capture`] errors, raised by ditto before the driver is asked.
//! - Every replay reads and writes the very buffers the capture used. So buffers made
//!   during the capture come from a private pool of the graph: when a tensor made in the
//!   region dies, its block goes back to that pool, never to the shared cache, and
//!   other code cannot be handed memory a later replay overwrites. So does any block
//!   freed during the capture (an older tensor the region overwrote and dropped). The pool's blocks go
//!   to the shared cache when the graph is dropped. Inputs are fed by overwriting
//!   tensors made before the capture in place (`copy_from_`), outputs are read from
//!   tensors the region returned.
//! - One capture per device at a time, and only the capturing thread may queue work on
//!   the device meanwhile (it would land in the graph). The capture is in the driver's
//!   relaxed mode: ditto's own checks above refuse what must not happen, and a block
//!   the pool lacks can still be allocated (with `cuMemAlloc`, which the stream-ordered
//!   allocation of eager code would turn into a graph node). Nothing goes back to the
//!   driver during a capture: `empty_cache` is refused, and out of memory is
//!   [`CudaError::OutOfMemory`].
//! - Libraries may still allocate stream-ordered memory inside a capture. cuBLAS does
//!   for its workspace unless one was set; ditto sets one per device with its handle
//!   (`ops::cuda::matmul`), and instantiates graphs with auto-free-on-launch, so a
//!   graph holding such an allocation can still be replayed.
//!
//! Random numbers need more (their Philox offset would be frozen into the graph): see
//! `rng_gen::graph`, which builds on this.

use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};

use crate::capture_state::{active, capture_error, Active};
use crate::registry::guarded;
use crate::{allocator, default_stream, driver_error};

pub use crate::capture_state::{is_capturing, refuse_during_capture};
use crate::{CudaError, Result};

/// How captured graphs are instantiated: `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`,
/// as PyTorch's `CUDAGraph` does. A library may allocate stream-ordered memory during a
/// capture (cuBLAS does for its workspace when none was set), which the graph records as
/// an allocation node it never frees; the driver refuses to launch such a graph again
/// unless this flag lets each launch free the previous launch's allocations first.
const INSTANTIATE_FLAGS: CUgraphInstantiate_flags =
    CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;

/// A captured, instantiated graph of device work; [`replay`](Self::replay) runs it.
pub struct CudaGraph {
    ordinal: usize,
    graph: cudarc::driver::CudaGraph,
    pool: u64,
}

// SAFETY: the driver's graph handles may be used from any thread, one thread at a time
// ("graph objects are not internally synchronized"): moving a `CudaGraph` to another
// thread is fine, and it is not `Sync`, so two threads can never launch or destroy it at
// once. (cudarc leaves its `CudaGraph` !Send only because it holds raw pointers.)
unsafe impl Send for CudaGraph {}

impl std::fmt::Debug for CudaGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaGraph")
            .field("ordinal", &self.ordinal)
            .finish_non_exhaustive()
    }
}

impl CudaGraph {
    /// Captures the device work `region` queues on device `ordinal` and instantiates it
    /// (`torch.cuda.graph`). Returns the graph and what `region` returned (typically
    /// the output tensors a replay rewrites). If `region` fails, or queues something a
    /// graph cannot hold, nothing is kept and the error is returned. The region's work
    /// is recorded, not run: its outputs hold their values only after a replay.
    ///
    /// Generic in the error type, so the region returns its own crate's errors
    /// (tensor-core's `TensorError`, ...), into which this crate's convert.
    pub fn capture<R, E: From<CudaError>>(
        ordinal: usize,
        region: impl FnOnce() -> std::result::Result<R, E>,
    ) -> std::result::Result<(Self, R), E> {
        static NEXT_POOL: AtomicU64 = AtomicU64::new(1);
        let stream = default_stream(ordinal)?;
        let pool = NEXT_POOL.fetch_add(1, Ordering::Relaxed);
        {
            let mut active = active();
            if active.contains_key(&ordinal) {
                return Err(capture_error(
                    ordinal,
                    "CudaGraph::capture",
                    "began while another capture of the device is in progress",
                )
                .into());
            }
            let thread = std::thread::current().id();
            allocator::open_pool(ordinal, pool);
            active.insert(ordinal, Active { thread, pool });
        }
        let begun: std::result::Result<(), E> = guarded(ordinal, || {
            stream
                .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
                .map_err(|e| driver_error(ordinal, "begin capture")(e).into())
        });
        // A panicking region still ends the capture (then the panic goes on), so the
        // device is not left refusing uploads and reads for the rest of the process.
        let result = match begun {
            Ok(()) => match std::panic::catch_unwind(std::panic::AssertUnwindSafe(region)) {
                Ok(result) => result,
                Err(panic) => {
                    if is_stream_capturing(&stream) {
                        let _ = stream.end_capture(INSTANTIATE_FLAGS);
                    }
                    active().remove(&ordinal);
                    allocator::close_pool(ordinal, pool);
                    std::panic::resume_unwind(panic);
                }
            },
            Err(e) => Err(e),
        };
        let ended: std::result::Result<_, E> = if result.is_ok() || is_stream_capturing(&stream) {
            guarded(ordinal, || {
                stream
                    .end_capture(INSTANTIATE_FLAGS)
                    .map_err(|e| driver_error(ordinal, "end capture")(e).into())
            })
        } else {
            Ok(None)
        };
        active().remove(&ordinal);
        let outcome = match (result, ended) {
            (Err(e), _) | (Ok(_), Err(e)) => Err(e),
            (Ok(_), Ok(None)) => Err(capture_error(
                ordinal,
                "CudaGraph::capture",
                "ended without a graph (the driver returned none)",
            )
            .into()),
            (Ok(value), Ok(Some(graph))) => Ok((
                CudaGraph {
                    ordinal,
                    graph,
                    pool,
                },
                value,
            )),
        };
        if outcome.is_err() {
            allocator::close_pool(ordinal, pool);
        }
        outcome
    }

    /// Runs the captured work again, queued on the device's stream like any op: one
    /// `cuGraphLaunch`. Errors during a capture of the device.
    pub fn replay(&self) -> Result<()> {
        if is_capturing(self.ordinal) {
            return Err(capture_error(
                self.ordinal,
                "CudaGraph::replay",
                "was called during a capture (graphs do not nest)",
            ));
        }
        guarded(self.ordinal, || {
            self.graph
                .launch()
                .map_err(driver_error(self.ordinal, "graph launch"))
        })
    }

    /// The CUDA device ordinal the graph runs on.
    #[must_use]
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
}

/// The private pool's blocks go back to the shared cache: no replay can use them now.
impl Drop for CudaGraph {
    fn drop(&mut self) {
        allocator::close_pool(self.ordinal, self.pool);
    }
}

/// Whether the stream is still capturing (a region that failed half-way), so the
/// capture must be ended before the stream can be used again.
fn is_stream_capturing(stream: &std::sync::Arc<cudarc::driver::CudaStream>) -> bool {
    use cudarc::driver::sys::CUstreamCaptureStatus;
    stream
        .capture_status()
        .is_ok_and(|s| s != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}
