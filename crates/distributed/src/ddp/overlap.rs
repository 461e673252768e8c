//! Fast mode's overlap of backward and communication: each gradient bucket's all-reduce
//! is enqueued as soon as the backward has reported all of its parameters, as PyTorch's
//! DDP does from its autograd hooks. NCCL's collectives return once enqueued, so the host
//! goes on issuing the backward of the earlier layers while the stream reduces the later
//! buckets.
//!
//! Every rank runs the same model, so every rank reports the parameters in the same
//! order and launches the buckets in the same order, which NCCL requires; the sums do
//! not depend on that order (each bucket is reduced on its own).

use nn_mini::Parameter;
use tensor_core::{DType, Device, Tensor};

use super::buckets::Buckets;
use super::reduce::fast_sum;
use crate::{DistError, ProcessGroup, Result};

/// The buckets of one fast step, launched as their gradients become ready.
pub(super) struct BucketLauncher<'a> {
    buckets: &'a Buckets,
    group: &'a dyn ProcessGroup,
    /// Appended to the last bucket (the step's weighted loss).
    loss: &'a Tensor,
    dtype: DType,
    device: Device,
    /// Each parameter's gradient, once reported.
    grads: Vec<Option<Tensor>>,
    reported: Vec<bool>,
    /// Each bucket's all-reduced buffer, once launched.
    flat: Vec<Option<Tensor>>,
    /// The first launch that failed: no bucket is launched after it.
    error: Option<DistError>,
}

impl<'a> BucketLauncher<'a> {
    /// For `buckets` (`counts`: how many buckets, how many parameters) of parameters of
    /// `dtype` on `device`.
    pub(super) fn new(
        buckets: &'a Buckets,
        group: &'a dyn ProcessGroup,
        loss: &'a Tensor,
        (dtype, device): (DType, Device),
        (count, params): (usize, usize),
    ) -> Self {
        BucketLauncher {
            buckets,
            group,
            loss,
            dtype,
            device,
            grads: vec![None; params],
            reported: vec![false; params],
            flat: vec![None; count.max(1)],
            error: None,
        }
    }

    /// The gradients of parameters `first..first + params.len()` are final: launches
    /// every bucket that is now complete.
    pub(super) fn ready(&mut self, first: usize, params: &[&Parameter]) {
        for (j, p) in params.iter().enumerate() {
            if let Some(slot) = self.grads.get_mut(first + j) {
                *slot = p.grad.clone();
                self.reported[first + j] = true;
            }
        }
        self.launch(false);
    }

    /// Launches the buckets not launched yet (parameters never reported have no
    /// gradient: zeros) and returns every bucket's sum, or the first error.
    pub(super) fn finish(mut self) -> Result<Vec<Tensor>> {
        self.launch(true);
        if let Some(error) = self.error {
            return Err(error);
        }
        Ok(self
            .flat
            .into_iter()
            .map(|t| t.expect("launched"))
            .collect())
    }

    /// Launches the complete buckets (`all`: every bucket), last bucket first.
    fn launch(&mut self, all: bool) {
        for b in (0..self.flat.len()).rev() {
            if self.error.is_some() {
                return;
            }
            let complete = all
                || self
                    .buckets
                    .params_of(b)
                    .all(|i| self.reported.get(i).copied().unwrap_or(false));
            if self.flat[b].is_some() || !complete {
                continue;
            }
            match self.reduce(b) {
                Ok(sum) => self.flat[b] = Some(sum),
                Err(e) => self.error = Some(e),
            }
        }
    }

    fn reduce(&self, b: usize) -> Result<Tensor> {
        let grads: Vec<Option<&Tensor>> = self.grads.iter().map(Option::as_ref).collect();
        let mut bucket =
            self.buckets
                .flatten_bucket(b, &grads, self.loss, self.dtype, self.device)?;
        fast_sum(self.group, &mut bucket)?;
        Ok(bucket)
    }
}
