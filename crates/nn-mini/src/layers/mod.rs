//! The layers: one per file.

mod dropout;
mod embedding;
mod linear;
mod relu;
mod sequential;

pub use dropout::Dropout;
pub use embedding::Embedding;
pub use linear::Linear;
pub use relu::ReLU;
pub use sequential::Sequential;
