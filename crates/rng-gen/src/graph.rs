//! CUDA graphs with graph-safe random numbers: [`Graph::capture`] / [`Graph::replay`].
//!
//! Why this needs its own module: an eager random op reserves its Philox stretch on the
//! host and passes `(seed, offset)` to its kernel as values. Captured into a CUDA graph,
//! those values would be frozen, and every replay would draw the same numbers (the
//! dropout mask of step 1 on every step: PyTorch #84614). ditto does what PyTorch does
//! (CUDAGeneratorImpl, PhiloxCudaState, CUDAGraph.cpp):
//!
//! - During a capture, a random op on the captured device reserves its stretch *within
//!   the graph*: its offset counts from the graph's start (`intra_offset`), and the
//!   generator's host offset does not move. The op launches its kernel's graph twin,
//!   which reads `{seed, base offset}` from two device words the generator owns and
//!   adds `intra_offset` (`kernels::launch::Philox::Graphed`). The words are new driver
//!   memory, never a block the allocator cached: a cached block may be one a node of
//!   the capture writes, which would overwrite the words on every replay.
//! - The capture ends with one node per generator that moves the base offset in the
//!   device words past the graph's whole reservation (`ditto_philox_advance_kernel`).
//! - A replay first makes each generator's device words hold its current host
//!   `(seed, offset)` (one small upload, only when something else moved the generator
//!   since the last replay), launches the graph, and advances the host offset by the
//!   graph's reservation. So replay `k` draws exactly the numbers the same ops run
//!   eagerly at that point would draw: replays and eager steps mix freely, and a
//!   checkpoint taken between replays (`get_state`) resumes either way.
//!
//! Rules, each an [`RngError::Capture`]: during a capture that draws from a generator,
//! setting its seed or state ([`Generator::manual_seed`], [`Generator::set_state`],
//! [`Generator::set_offset`], [`Generator::set_key`]), reading its state
//! ([`Generator::get_state`]) or reserving from it by hand ([`Generator::reserve_blocks`])
//! makes the capture fail (`try_manual_seed`, `try_get_state` and `set_state` fail at
//! once); a second thread drawing from it fails; a random op without a graph twin (only
//! the training step's random ops have one: dropout, and the fused causal attention,
//! whose kernels read the device words themselves) or a replay of a given stretch
//! fails, and so does the fused attention's backward outside the capture its forward
//! was captured in (`refuse_regenerating_elsewhere`). tensor-core's capture rules (no
//! host reads or uploads, one capture per device, see `cuda_runtime::graph`) apply too.

use std::thread::ThreadId;

use crate::stream::key::Key;
use crate::{Generator, RngError};

fn capture_error(op: &'static str, reason: impl Into<String>) -> RngError {
    RngError::Capture {
        op,
        reason: reason.into(),
    }
}

/// A generator's capture in progress: who captures, and how far the graph reserved.
#[derive(Debug)]
struct Capturing {
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // only CUDA graphs capture
    thread: ThreadId,
    /// Blocks reserved since the capture began (the next op's `intra_offset`).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    intra: u64,
    /// The first call that broke a capture rule (the capture then fails).
    misuse: Option<&'static str>,
}

/// A generator's part in CUDA graphs, kept under its lock.
#[derive(Debug, Default)]
pub(crate) struct GeneratorGraphState {
    capture: Option<Capturing>,
    #[cfg(feature = "cuda")]
    words: Option<cuda_graph::DeviceWords>,
}

impl GeneratorGraphState {
    /// During a capture drawing from the generator: notes `op` as a broken rule (the
    /// capture will fail) and returns true. Otherwise false.
    pub(crate) fn note_misuse(&mut self, op: &'static str) -> bool {
        match &mut self.capture {
            Some(c) => {
                c.misuse.get_or_insert(op);
                true
            }
            None => false,
        }
    }

    /// [`RngError::Capture`] for `op` during a capture drawing from the generator.
    pub(crate) fn refuse_if_captured(&self, op: &'static str) -> Result<(), RngError> {
        match self.capture {
            Some(_) => Err(misuse_error(op)),
            None => Ok(()),
        }
    }
}

fn misuse_error(op: &'static str) -> RngError {
    capture_error(
        op,
        "was called on a generator a CUDA graph capture draws from: its state is decided \
         by the replays; call it before the capture or between replays",
    )
}

/// What a random op reserved: its key, and during a capture the generator's device
/// words its kernel's graph twin reads (the key's offset is then `intra_offset`).
pub(crate) struct Reserved {
    pub(crate) key: Key,
    #[cfg(feature = "cuda")]
    pub(crate) words: Option<std::sync::Arc<tensor_core::cuda::CudaStorage>>,
}

impl Reserved {
    pub(crate) fn eager(key: Key) -> Self {
        Reserved {
            key,
            #[cfg(feature = "cuda")]
            words: None,
        }
    }
}

/// Step 3 of every random op (`ops::pipeline`): moves `generator` past the op's `blocks`
/// and returns the key of the first. The one place an op reserves (ops that skip the
/// computation, like dropout with `p = 0`, still come here). The audit records the
/// reservation in `run_recorded` (and dropout's `p = 0` path next to its call here).
/// On the host, or within the graph when this thread is capturing the generator's CUDA
/// device ([`crate::graph`]).
pub(crate) fn reserve(
    op: &'static str,
    generator: &Generator,
    blocks: u64,
) -> Result<Reserved, RngError> {
    #[cfg(feature = "cuda")]
    if let tensor_core::Device::Cuda(ordinal) = generator.device() {
        if let Some(reserved) = cuda_graph::reserve_in_capture(op, generator, ordinal, blocks)? {
            return Ok(reserved);
        }
    }
    let _ = op;
    Ok(Reserved::eager(generator.reserve_blocks(blocks)))
}

/// Errors when `device` is being captured: for an op that replays a stretch given by
/// key (its numbers would be frozen into the graph).
pub(crate) fn refuse_replay_in_capture(
    op: &'static str,
    device: tensor_core::Device,
) -> Result<(), RngError> {
    #[cfg(feature = "cuda")]
    if let tensor_core::Device::Cuda(ordinal) = device {
        if cuda_graph::is_captured(ordinal) {
            return Err(capture_error(
                op,
                "replays a stretch given by key, which a graph would freeze; keep the \
                 packed mask instead of regenerating it",
            ));
        }
    }
    let _ = (op, device);
    Ok(())
}

/// Errors where a kernel regenerating a reservation's numbers (the fused attention's
/// backward, which draws its forward's mask again) would get others: for a reservation
/// made within a graph (`graphed`: its offset counts from the graph's start, which only
/// that capture's nodes see) outside a capture of `ordinal`, and for one made eagerly
/// inside one, as [`refuse_replay_in_capture`].
#[cfg(feature = "cuda")]
pub(crate) fn refuse_regenerating_elsewhere(
    op: &'static str,
    ordinal: usize,
    graphed: bool,
) -> Result<(), RngError> {
    if !graphed {
        return refuse_replay_in_capture(op, tensor_core::Device::Cuda(ordinal));
    }
    if !cuda_graph::is_captured(ordinal) {
        return Err(capture_error(
            op,
            format!(
                "regenerates numbers reserved within a CUDA graph outside a capture of \
                 cuda:{ordinal}: run it in the capture its forward was captured in"
            ),
        ));
    }
    Ok(())
}

/// Errors during a capture of `ordinal` for a random op whose CUDA kernel `kernel` has
/// no graph twin: its numbers would be frozen into the graph.
#[cfg(feature = "cuda")]
pub(crate) fn refuse_uncapturable(
    op: &'static str,
    ordinal: usize,
    kernel: &str,
) -> Result<(), RngError> {
    if cuda_graph::is_captured(ordinal) && kernels::launch::graphed_twin(kernel).is_none() {
        return Err(capture_error(
            op,
            format!(
                "cannot be captured into a CUDA graph ({kernel} has no graph twin; dropout has)"
            ),
        ));
    }
    Ok(())
}

#[cfg(feature = "cuda")]
mod cuda_graph;
#[cfg(feature = "cuda")]
pub use cuda_graph::Graph;
