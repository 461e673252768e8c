//! `Batch`, and how the samples of one batch are loaded and stacked.

use std::panic::{catch_unwind, AssertUnwindSafe};

use rng_gen::Key;
use tensor_core::{audit, Tensor};

use super::keys::sample_key;
use super::{Dataset, SampleRng};
use crate::{NnError, Result};

/// A batch as the loader delivers it: stacked inputs and targets, plus where it came
/// from (useful for logging and for tests that compare runs).
#[derive(Clone, Debug)]
pub struct Batch {
    /// Inputs stacked along a new first dimension: `[batch, ...sample input dims]`.
    pub input: Tensor,
    /// Targets stacked the same way: `[batch, ...sample target dims]`.
    pub target: Tensor,
    /// The dataset indices of the samples, in batch order.
    pub indices: Vec<usize>,
    /// The epoch the batch belongs to.
    pub epoch: u64,
    /// The batch's position within its epoch (0-based).
    pub index: u64,
}

/// Loads the samples `indices` of batch `index` of `epoch` and stacks them. A pure
/// function of its arguments: workers and the main thread call it alike, so where a
/// batch is loaded never changes what it contains.
pub(crate) fn load_batch(
    dataset: &dyn Dataset,
    loader_key: Key,
    epoch: u64,
    index: u64,
    indices: Vec<usize>,
) -> Result<Batch> {
    let mut inputs = Vec::with_capacity(indices.len());
    let mut targets = Vec::with_capacity(indices.len());
    for &i in &indices {
        let mut rng = SampleRng::from_key(sample_key(loader_key, epoch, i as u64));
        let sample = dataset.get(i, &mut rng)?;
        inputs.push(sample.input.unsqueeze(0)?);
        targets.push(sample.target.unsqueeze(0)?);
    }
    Ok(Batch {
        input: Tensor::cat(&inputs, 0)?,
        target: Tensor::cat(&targets, 0)?,
        indices,
        epoch,
        index,
    })
}

/// [`load_batch`] with a panic inside the dataset turned into
/// [`NnError::WorkerPanicked`] (`worker` is `None` on the calling thread), so a buggy
/// dataset gives the same error with or without worker threads.
pub(crate) fn load_batch_guarded(
    dataset: &dyn Dataset,
    worker: Option<usize>,
    loader_key: Key,
    epoch: u64,
    index: u64,
    indices: Vec<usize>,
) -> Result<Batch> {
    // The audit numbers the batch's ops in a stream named after the batch, not after the
    // thread that happened to load it, so traces with any worker count compare equal.
    let stream = || {
        format!(
            "loader/{:016x}.{}/e{epoch}/b{index}",
            loader_key.seed, loader_key.offset
        )
    };
    audit::stream(stream, || {
        catch_unwind(AssertUnwindSafe(|| {
            load_batch(dataset, loader_key, epoch, index, indices)
        }))
    })
    .unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".into());
        Err(NnError::WorkerPanicked {
            worker,
            epoch,
            batch: index,
            message,
        })
    })
}
