//! The layers: one per file.

pub(crate) mod dropout;
mod embedding;
mod gelu;
mod layer_norm;
mod linear;
mod relu;
mod sequential;

pub use dropout::Dropout;
pub use embedding::Embedding;
pub use gelu::Gelu;
pub use layer_norm::LayerNorm;
pub use linear::Linear;
pub use relu::ReLU;
pub use sequential::Sequential;
