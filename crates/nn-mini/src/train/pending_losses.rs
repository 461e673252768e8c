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

/// Up to [`LOSS_SLOTS`] f32 losses on the run's device, the first `count` pending.
#[derive(Debug, Default)]
pub(crate) struct PendingLosses {
    buffer: Option<Tensor>,
    count: usize,
}

impl PendingLosses {
    /// Losses written and not yet taken.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Whether the next [`push`](Self::push) needs a [`take`](Self::take) first.
    pub(crate) fn is_full(&self) -> bool {
        self.count == LOSS_SLOTS
    }

    /// Writes the scalar `loss` (f32) into the next slot, on the loss's device: no copy
    /// to the host. Errors when the buffer is full.
    pub(crate) fn push(&mut self, loss: &Tensor) -> Result<()> {
        if self.is_full() {
            return Err(crate::NnError::invalid(
                "PendingLosses::push",
                format!("all {LOSS_SLOTS} slots hold unread losses: read them first"),
            ));
        }
        let buffer = match &mut self.buffer {
            Some(buffer) if buffer.device() == loss.device() => buffer,
            slot => slot.insert(Tensor::zeros(&[LOSS_SLOTS], DType::F32, loss.device())?),
        };
        buffer.slice_scatter_(&loss.reshape(&[1])?, 0, self.count)?;
        self.count += 1;
        Ok(())
    }

    /// The pending losses on the host, in step order (one copy from the device); they
    /// stay pending.
    pub(crate) fn peek(&self) -> Result<Vec<f32>> {
        match &self.buffer {
            Some(buffer) if self.count > 0 => {
                Ok(buffer.narrow(0, 0, self.count)?.to_vec::<f32>()?)
            }
            _ => Ok(Vec::new()),
        }
    }

    /// [`peek`](Self::peek), then the slots are free again.
    pub(crate) fn take(&mut self) -> Result<Vec<f32>> {
        let losses = self.peek()?;
        self.count = 0;
        Ok(losses)
    }
}
