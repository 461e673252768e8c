//! Losses. Each returns the loss and its gradient with respect to the prediction, which
//! is what [`crate::Module::backward`] takes.

mod class_targets;
mod cross_entropy;
mod mse;

pub use class_targets::ClassTargets;
pub use cross_entropy::{cross_entropy, cross_entropy_with};
pub use mse::mse_loss;
