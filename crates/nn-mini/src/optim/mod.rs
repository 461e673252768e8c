//! Optimisers.

mod sgd;

pub use sgd::{Sgd, SgdConfig};
