//! `ClassTargets`: integer class targets checked on the host, kept where the logits are.
//!
//! Why a type: a target outside `[0, classes)` must be an error naming the row, and
//! checking needs the values on the host. A training loop has them there (the loader
//! makes the batch on the host), so it checks them there and uploads them once; the
//! loss then picks on the device without reading anything back. A CUDA graph's step
//! refills the same device buffer each step ([`ClassTargets::refill`]), checked the
//! same way, so a replayed step can never read a bad target either.

use tensor_core::{DType, Device, Tensor};

use crate::{NnError, Result};

/// A `[batch]` i64 tensor of class indices, each checked to lie in `0..classes`, on the
/// device the loss runs on.
#[derive(Clone, Debug)]
pub struct ClassTargets {
    targets: Tensor,
    classes: usize,
}

/// Errors unless `targets` is `[batch]` i64 with every value in `0..classes`. Reads the
/// values to the host (free for host targets).
fn check(op: &'static str, targets: &Tensor, batch: usize, classes: usize) -> Result<()> {
    if targets.dtype() != DType::I64 || targets.dims() != [batch] {
        return Err(NnError::invalid(
            op,
            format!(
                "targets must be [{batch}] of i64 class indices, got {:?} of {}",
                targets.dims(),
                targets.dtype()
            ),
        ));
    }
    for (row, &target) in targets.to_vec::<i64>()?.iter().enumerate() {
        if usize::try_from(target).map_or(true, |c| c >= classes) {
            return Err(NnError::InvalidTarget {
                op,
                row,
                target,
                classes,
            });
        }
    }
    Ok(())
}

impl ClassTargets {
    /// Checks `targets` (`[batch]` i64, each in `0..classes`; read to the host if on a
    /// device) and places them on `device` (one upload for host targets).
    pub fn new(op: &'static str, targets: &Tensor, classes: usize, device: Device) -> Result<Self> {
        let batch = targets.dims().first().copied().unwrap_or(0);
        check(op, targets, batch, classes)?;
        Ok(ClassTargets {
            targets: targets.to_device(device)?,
            classes,
        })
    }

    /// Checks the host tensor `targets` (same batch size, each in `0..classes`) and
    /// writes it into this buffer in place, shared with every clone (one upload): the
    /// targets input of a CUDA graph's training step (see
    /// `Tensor::copy_from_host_shared`).
    pub fn refill(&self, targets: &Tensor) -> Result<()> {
        check(
            "ClassTargets::refill",
            targets,
            self.targets.elem_count(),
            self.classes,
        )?;
        Ok(self.targets.copy_from_host_shared(targets)?)
    }

    /// The checked targets, on their device.
    #[must_use]
    pub fn tensor(&self) -> &Tensor {
        &self.targets
    }

    /// The number of classes every target was checked against.
    #[must_use]
    pub fn classes(&self) -> usize {
        self.classes
    }
}
