//! The optimisers' fused steps, one op over a parameter, its state and its gradient:
//! SGD with momentum (`fused_sgd`) and AdamW (`adamw`); `cuda` runs each as one kernel.
//! `clip` is gradient-norm clipping's arithmetic, kept on the gradients' device.

pub(crate) mod adamw;
pub mod adamw_many;
mod clip;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub mod fused_sgd;
