//! The random-stream specification (docs/contract.md §2 to §7), in Rust: the engine,
//! keys, the word-to-number conversions and the f32 routines they need, and how many
//! blocks each built-in op consumes. Everything above this module (generators, samplers,
//! the data loader) only decides which words to use.

pub mod convert;
pub mod f32math;
pub mod half_float;
pub mod increment;
pub mod key;
pub mod philox;
pub mod philox_batch;
