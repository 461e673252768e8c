//! Losses. Each returns the loss and its gradient with respect to the prediction, which
//! is what [`crate::Module::backward`] takes.

mod cross_entropy;
mod mse;

pub use cross_entropy::cross_entropy;
pub use mse::mse_loss;
