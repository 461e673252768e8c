//! The CUDA half of [`super`]: the device words, the capture registry and [`Graph`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::ThreadId;

use tensor_core::cuda::{CudaGraph, CudaStorage};
use tensor_core::{CpuStorage, DType, Device};

use super::{capture_error, Capturing, Reserved};
use crate::stream::key::Key;
use crate::{Generator, RngError};

/// A generator's `{seed, base offset}` on its CUDA device, read by graph kernels.
///
/// Made at the generator's first capture, in memory no node of any capture writes
/// ([`CudaStorage::alloc_uninit_uncached`]): a replay uploads the words and then runs
/// the whole graph, so words sharing a block with a buffer some node writes (a
/// temporary that died earlier in the capture, whose block the allocator would hand
/// out again) would be overwritten after the upload, and the replay would draw from
/// garbage. They live as long as the generator, and every graph that drew from it holds
/// the generator.
#[derive(Debug)]
pub(super) struct DeviceWords {
    storage: Arc<CudaStorage>,
    /// What the words will hold once the work queued so far has run, as far as the
    /// host knows (`None`: unknown, upload before the next replay).
    holds: Option<(u64, u64)>,
}

/// A capture of one device in progress, with the generators it drew from.
struct RngCapture {
    thread: ThreadId,
    generators: Vec<Generator>,
}

fn captures() -> MutexGuard<'static, HashMap<usize, RngCapture>> {
    static CAPTURES: OnceLock<Mutex<HashMap<usize, RngCapture>>> = OnceLock::new();
    // Inserts, removes and pushes only: a panic cannot leave the map inconsistent.
    CAPTURES
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Whether a [`Graph::capture`] of device `ordinal` is in progress.
pub(super) fn is_captured(ordinal: usize) -> bool {
    captures().contains_key(&ordinal)
}

/// [`super::reserve`] during a capture of `ordinal`; `None` when there is none.
pub(super) fn reserve_in_capture(
    op: &'static str,
    generator: &Generator,
    ordinal: usize,
    blocks: u64,
) -> Result<Option<Reserved>, RngError> {
    let me = std::thread::current().id();
    {
        let mut captures = captures();
        let Some(capture) = captures.get_mut(&ordinal) else {
            return Ok(None);
        };
        if capture.thread != me {
            return Err(capture_error(
                op,
                format!("drew on cuda:{ordinal} from a thread other than the one capturing it"),
            ));
        }
        if !capture.generators.iter().any(|g| g.same_as(generator)) {
            capture.generators.push(generator.clone());
        }
    }
    generator.with_graph_state(|state, _offset, seed| {
        let capturing = state.capture.get_or_insert(Capturing {
            thread: me,
            intra: 0,
            misuse: None,
        });
        if capturing.thread != me {
            return Err(capture_error(
                op,
                "drew from a generator another thread's capture draws from",
            ));
        }
        let intra = capturing.intra;
        capturing.intra = intra.wrapping_add(blocks);
        if state.words.is_none() {
            // New driver memory, never a cached block: the host uploads the words before
            // a replay, and the replay then runs every node of the graph; a block that
            // died earlier in this capture (the graph's pool) or was overwritten and
            // dropped in it (the shared cache) is written by such a node, which would
            // overwrite the words after the upload. No memset: a graph would replay it.
            let storage = CudaStorage::alloc_uninit_uncached(ordinal, DType::I64, 2)?;
            state.words = Some(DeviceWords {
                storage: Arc::new(storage),
                holds: None,
            });
        }
        let words = state.words.as_ref().map(|w| w.storage.clone());
        Ok(Some(Reserved {
            key: Key {
                seed,
                offset: intra,
            },
            words,
        }))
    })
}

/// A captured CUDA graph whose random ops draw fresh numbers on every replay, from the
/// generators the capture drew from (see the [module docs](super)).
pub struct Graph {
    cuda: CudaGraph,
    /// Each generator the graph draws from, with the blocks one replay reserves.
    generators: Vec<(Generator, u64)>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("ordinal", &self.cuda.ordinal())
            .field("generators", &self.generators.len())
            .finish()
    }
}

impl Graph {
    /// Captures the work `region` queues on `device` (a CUDA device) into a graph
    /// (`torch.cuda.graph`), and returns it with what `region` returned (the tensors a
    /// replay rewrites). The region's work is recorded, not run; its random ops draw
    /// graph-safe numbers. Fails, keeping nothing, when `region` fails or breaks a
    /// capture rule; the generators it drew from are then as before. The region's error
    /// type is the caller's (anything an [`RngError`] converts into).
    pub fn capture<R, E: From<RngError>>(
        device: Device,
        region: impl FnOnce() -> Result<R, E>,
    ) -> Result<(Graph, R), E> {
        const OP: &str = "Graph::capture";
        let Device::Cuda(ordinal) = device else {
            return Err(capture_error(OP, format!("needs a CUDA device, got {device}")).into());
        };
        crate::registry::check_device(device)?;
        {
            let mut captures = captures();
            if captures.contains_key(&ordinal) {
                return Err(capture_error(
                    OP,
                    format!("began while cuda:{ordinal} is being captured"),
                )
                .into());
            }
            let thread = std::thread::current().id();
            captures.insert(
                ordinal,
                RngCapture {
                    thread,
                    generators: Vec::new(),
                },
            );
        }
        let captured = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            CudaGraph::capture(ordinal, || {
                let value = region();
                if value.is_ok() {
                    advance_nodes(ordinal)?;
                }
                Ok(value)
            })
        }));
        let (generators, misuse) = end_capture(ordinal);
        let captured = captured.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let (cuda, value) = captured.map_err(RngError::from)?;
        let value = value?;
        if let Some(op) = misuse {
            return Err(super::misuse_error(op).into());
        }
        Ok((Graph { cuda, generators }, value))
    }

    /// Runs the captured work again (one `cuGraphLaunch`), drawing the next numbers of
    /// each generator, which moves on by what the capture reserved, as if the region
    /// had run eagerly.
    pub fn replay(&self) -> Result<(), RngError> {
        for (g, _) in &self.generators {
            g.with_graph_state(|state, offset, seed| {
                if state.capture.is_some() {
                    return Err(capture_error(
                        "Graph::replay",
                        "draws from a generator another capture is drawing from",
                    ));
                }
                let words = state
                    .words
                    .as_mut()
                    .expect("a generator a capture drew from has device words");
                if words.holds != Some((seed, *offset)) {
                    // Two's complement: the kernel reads the same 64 bits as u64.
                    let values = vec![seed as i64, *offset as i64];
                    words
                        .storage
                        .write_from_cpu_shared(0, &CpuStorage::I64(values))?;
                    words.holds = Some((seed, *offset));
                }
                Ok(())
            })?;
        }
        self.cuda.replay()?;
        for (g, increment) in &self.generators {
            g.with_graph_state(|state, offset, seed| {
                *offset = offset.wrapping_add(*increment);
                if let Some(words) = &mut state.words {
                    words.holds = Some((seed, *offset));
                }
            });
        }
        Ok(())
    }

    /// The CUDA device the graph runs on.
    #[must_use]
    pub fn device(&self) -> Device {
        Device::Cuda(self.cuda.ordinal())
    }

    /// Philox blocks one replay reserves from `generator` (0 if it does not draw from
    /// it): how far each replay moves it.
    #[must_use]
    pub fn increment_of(&self, generator: &Generator) -> u64 {
        self.generators
            .iter()
            .find(|(g, _)| g.same_as(generator))
            .map_or(0, |&(_, n)| n)
    }
}

/// Ends the bookkeeping of the capture of `ordinal` (also after a failure or a panic):
/// the generators it drew from leave capture mode; returns them with what one replay
/// reserves from each, and the first broken rule, if any.
fn end_capture(ordinal: usize) -> (Vec<(Generator, u64)>, Option<&'static str>) {
    let drew_from = captures()
        .remove(&ordinal)
        .map(|c| c.generators)
        .unwrap_or_default();
    let mut misuse = None;
    let mut generators = Vec::new();
    for g in drew_from {
        if let Some(c) = g.with_graph_state(|state, _, _| state.capture.take()) {
            misuse = misuse.or(c.misuse);
            generators.push((g, c.intra));
        }
    }
    (generators, misuse)
}

/// The last nodes of a capture of `ordinal`: each generator it drew from moves its device
/// base offset past the graph's reservation.
fn advance_nodes(ordinal: usize) -> tensor_core::Result<()> {
    let generators = captures()
        .get(&ordinal)
        .map(|c| c.generators.clone())
        .unwrap_or_default();
    for g in generators {
        let (words, intra) = g.with_graph_state(|state, _, _| {
            let intra = state.capture.as_ref().map_or(0, |c| c.intra);
            (state.words.as_ref().map(|w| w.storage.clone()), intra)
        });
        if let (Some(words), true) = (words, intra > 0) {
            kernels::launch::philox_advance(&words, intra)
                .map_err(|e| e.into_tensor_error(ordinal))?;
        }
    }
    Ok(())
}
