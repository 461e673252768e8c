//! [`CudaGraph`] for tensor code (`torch.cuda.graph`): the runtime's graph, captured
//! from a region that returns tensor errors, so a capture reads like eager code
//! (`CudaGraph::capture(0, || { y.copy_from_(&x)?; Ok(()) })`) without naming an error
//! type. Capture, pools and replay are the runtime's (`cuda_runtime::graph`).

use crate::Result;

/// A captured, instantiated CUDA graph of ditto's work on one device.
#[derive(Debug)]
pub struct CudaGraph(cuda_runtime::CudaGraph);

impl CudaGraph {
    /// Captures the device work `region` queues on device `ordinal` and instantiates it.
    /// Returns the graph and what `region` returned (typically the output tensors a
    /// replay rewrites). If `region` fails, or queues something a graph cannot hold,
    /// nothing is kept and the error is returned. The region's work is recorded, not
    /// run: its outputs hold their values only after a replay.
    pub fn capture<R>(ordinal: usize, region: impl FnOnce() -> Result<R>) -> Result<(Self, R)> {
        let (graph, value) = cuda_runtime::CudaGraph::capture(ordinal, region)?;
        Ok((CudaGraph(graph), value))
    }

    /// Queues the whole graph on the device's stream, after all earlier ditto work.
    pub fn replay(&self) -> Result<()> {
        Ok(self.0.replay()?)
    }

    /// The device the graph runs on.
    #[must_use]
    pub fn ordinal(&self) -> usize {
        self.0.ordinal()
    }
}
