//! The losses of training steps whose values nobody has read yet, kept on the run's
//! device.
//!
//! Why: reading a loss on the host after every step is a device-to-host copy and a wait
//! for the device in every step, which stops the host from queueing the next step while
//! the GPU works. Each step instead writes its loss into the next slot of a small device
//! buffer (one kernel), and [`Run::read_losses`](super::Run::read_losses) brings
//! all the pending ones to the host in one copy, as often as the caller wants them
//! (the demo's `--log-every`). Every step's loss is still recorded, bit for bit.

use tensor_core::{DType, Tensor};

use crate::Result;

/// Steps whose losses one buffer holds; a full buffer is read before the next step.
pub const LOSS_SLOTS: usize = 256;

/// Up to [`LOSS_SLOTS`] f32 losses on the run's device, the first `count` pending, and
/// beside them (slots `LOSS_SLOTS ..`) the gradient norms of the steps whose update
/// clipped: both come back in the one copy.
#[derive(Debug, Default)]
pub(crate) struct PendingLosses {
    buffer: Option<Tensor>,
    count: usize,
    /// Which pending steps wrote a gradient norm.
    has_norm: Vec<bool>,
}

/// Pending losses on the host, and each step's gradient norm if it had one.
pub(crate) type ReadLosses = (Vec<f32>, Vec<Option<f32>>);

impl PendingLosses {
    /// Losses written and not yet taken.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Whether the next [`push`](Self::push) needs a [`take`](Self::take) first.
    pub(crate) fn is_full(&self) -> bool {
        self.count == LOSS_SLOTS
    }

    /// Writes the scalar `loss` (f32), and the step's gradient `norm` (a one-element f32
    /// tensor) when it has one, into the next slots, on the loss's device: no copy to the
    /// host. Errors when the buffer is full.
    pub(crate) fn push(&mut self, loss: &Tensor, norm: Option<&Tensor>) -> Result<()> {
        if self.is_full() {
            return Err(crate::NnError::invalid(
                "PendingLosses::push",
                format!("all {LOSS_SLOTS} slots hold unread losses: read them first"),
            ));
        }
        let buffer = match &mut self.buffer {
            Some(buffer) if buffer.device() == loss.device() => buffer,
            slot => slot.insert(Tensor::zeros(&[2 * LOSS_SLOTS], DType::F32, loss.device())?),
        };
        buffer.slice_scatter_(&loss.reshape(&[1])?, 0, self.count)?;
        if let Some(norm) = norm {
            let norm = norm.to_dtype(DType::F32)?.to_device(loss.device())?;
            buffer.slice_scatter_(&norm.reshape(&[1])?, 0, LOSS_SLOTS + self.count)?;
        }
        self.has_norm.push(norm.is_some());
        self.count += 1;
        Ok(())
    }

    /// The pending losses and norms on the host, in step order (one copy from the
    /// device); they stay pending.
    pub(crate) fn peek(&self) -> Result<ReadLosses> {
        let Some(buffer) = self.buffer.as_ref().filter(|_| self.count > 0) else {
            return Ok((Vec::new(), Vec::new()));
        };
        let any_norm = self.has_norm.iter().any(|&h| h);
        let span = if any_norm {
            LOSS_SLOTS + self.count
        } else {
            self.count
        };
        let values = buffer.narrow(0, 0, span)?.to_vec::<f32>()?;
        let losses = values[..self.count].to_vec();
        let norms = (0..self.count)
            .map(|i| self.has_norm[i].then(|| values[LOSS_SLOTS + i]))
            .collect();
        Ok((losses, norms))
    }

    /// [`peek`](Self::peek), then the slots are free again.
    pub(crate) fn take(&mut self) -> Result<ReadLosses> {
        let read = self.peek()?;
        self.count = 0;
        self.has_norm.clear();
        Ok(read)
    }
}
