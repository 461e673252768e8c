//! `adamw_step_many_`: one AdamW step over many parameters at once, PyTorch's
//! `torch.optim.AdamW(fused=True)` / `_foreach` idea in ditto's rule.
//!
//! Why: a GPT has dozens of parameters, and a step launching one kernel per parameter
//! spends its time launching (on the CUDA stand-in's small GPT, 28 of a step's 237
//! launches). On CUDA this launches one kernel per [`ADAMW_MANY`] parameters of a
//! dtype: their buffers and scalars travel by value in the kernel's arguments (as
//! PyTorch's `multi_tensor_apply` passes its tensor lists), so nothing is uploaded; block
//! row `y` of the grid walks parameter `y`. Every element still goes through the
//! single-tensor rule (`ops/optimizers/adamw.rs`, `ditto_adamw_op`), so the bits are
//! those of [`Tensor::adamw_step_`] on each parameter, on every device.
//!
//! [`ADAMW_MANY`]: crate::ops::ADAMW_MANY
//! [`Tensor::adamw_step_`]: crate::Tensor::adamw_step_

use crate::ops::optimizers::adamw::{check_slot, cpu_slot, AdamWSlot};
use crate::Result;

/// [`Tensor::adamw_step_`](crate::Tensor::adamw_step_) on every slot, with the same
/// checks and the same bits; on CUDA in one launch per
/// [`ADAMW_MANY`](crate::ops::ADAMW_MANY) parameters of one device and dtype. Every slot
/// is checked before anything is written.
#[track_caller]
pub fn adamw_step_many_(slots: &mut [AdamWSlot<'_>]) -> Result<()> {
    for slot in slots.iter() {
        check_slot("adamw_step_many_", slot)?;
    }
    #[cfg(feature = "cuda")]
    {
        let (on_cuda, on_cpu): (Vec<_>, Vec<_>) =
            slots.iter_mut().partition(|s| s.param.device().is_cuda());
        for slot in on_cpu {
            cpu_slot(slot)?;
        }
        crate::ops::optimizers::cuda::adamw_many(on_cuda)
    }
    #[cfg(not(feature = "cuda"))]
    {
        for slot in slots.iter_mut() {
            cpu_slot(slot)?;
        }
        Ok(())
    }
}
