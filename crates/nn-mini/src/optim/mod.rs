//! Optimisers, the learning-rate schedule and gradient clipping.

mod adamw;
mod clip;
mod optimizer;
mod schedule;
mod sgd;

pub use adamw::{AdamW, AdamWConfig, AdamWState};
pub use clip::clip_grad_norm_;
pub use optimizer::Optimizer;
pub use schedule::{cos_pi, WarmupCosine};
pub use sgd::{Sgd, SgdConfig};
