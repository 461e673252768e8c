//! Gumbel noise for ditto tensors, written outside ditto with only its public items.
//!
//! The op itself is `examples/custom_random_op/gumbel.rs`, the file ditto's example
//! uses, compiled here as part of this separate crate: if it used anything private to
//! ditto, this crate would not build.

#![warn(missing_docs)]

#[path = "../../custom_random_op/gumbel.rs"]
pub mod gumbel;

pub use gumbel::{gumbel, gumbel_, Gumbel};

/// The op's CUDA body (`gumbel.cuh`) compiled for the host by `build.rs`.
pub mod host {
    extern "C" {
        fn example_gumbel_host(seed: u64, offset: u64, n: u64, loc: f32, scale: f32, out: *mut f32);
    }

    /// `n` Gumbel samples computed by the CUDA body on the host, block by block, from the
    /// stream at `(seed, offset)`.
    #[must_use]
    pub fn gumbel(seed: u64, offset: u64, n: usize, loc: f32, scale: f32) -> Vec<f32> {
        let mut out = vec![0.0; n];
        // SAFETY: `out` holds `n` floats, all the body writes.
        unsafe { example_gumbel_host(seed, offset, n as u64, loc, scale, out.as_mut_ptr()) };
        out
    }
}
