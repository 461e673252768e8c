//! Optimisers.

mod sgd;
mod sgd_pass;

pub use sgd::{Sgd, SgdConfig};
