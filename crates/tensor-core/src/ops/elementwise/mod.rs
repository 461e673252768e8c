//! Elementwise ops: broadcasting arithmetic (`binary`), maps of one tensor (`unary`),
//! GELU (`gelu`), the optimisers' in-place updates (`inplace`); `cuda` launches all of
//! them on the device.

pub mod binary;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub mod gelu;
pub(crate) mod inplace;
pub mod unary;
