//! The CUDA headers, compiled for the host, as safe Rust functions (feature
//! `host-parity`).
//!
//! `crates/kernels/host/parity_shim.cpp` includes `cuda/*.cuh` with the host shim and exports
//! the `__host__ __device__` functions the kernels call: the Philox rounds, every
//! conversion, `ln`, `sincospi`, Box-Muller ([this module](self)), and the per-block
//! body of every kernel ([`blocks`]). The parity tests
//! (`crates/rng-gen/tests/integration/cuda_header_parity.rs`) compare them with the Rust engine bit
//! for bit, so the GPU code is checked on machines without a GPU; the GPU tests then
//! only have to show that the device runs it the same way.

pub mod blocks;
mod ffi;

pub use blocks::*;

/// `ditto_philox4x32_10` from `philox.cuh`.
#[must_use]
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut out = [0; 4];
    // SAFETY: both arrays hold the four words the C function reads / writes.
    unsafe { ffi::ditto_host_philox(counter.as_ptr(), key[0], key[1], out.as_mut_ptr()) };
    out
}

/// `ditto_block_words`: the four words of block `block` under `seed`.
#[must_use]
pub fn block_words(seed: u64, block: u64) -> [u32; 4] {
    let mut out = [0; 4];
    // SAFETY: `out` holds the four words written.
    unsafe { ffi::ditto_host_block_words(seed, block, out.as_mut_ptr()) };
    out
}

/// Safe wrappers of C functions that take and return plain values.
macro_rules! pure {
    ($(#[$doc:meta] $name:ident = $ffi:ident($($arg:ident: $t:ty),*) -> $ret:ty;)*) => {$(
        #[$doc]
        #[must_use]
        pub fn $name($($arg: $t),*) -> $ret {
            // SAFETY: a pure function of its value arguments.
            unsafe { ffi::$ffi($($arg),*) }
        }
    )*};
}

pure! {
    /// `ditto_f32_to_f16`, as f16 bits.
    f32_to_f16 = ditto_host_f32_to_f16(x: f32) -> u16;
    /// `ditto_f16_to_f32`.
    f16_to_f32 = ditto_host_f16_to_f32(h: u16) -> f32;
    /// `ditto_f32_to_bf16`, as bf16 bits.
    f32_to_bf16 = ditto_host_f32_to_bf16(x: f32) -> u16;
    /// `ditto_bf16_to_f32`.
    bf16_to_f32 = ditto_host_bf16_to_f32(b: u16) -> f32;
    /// `ditto_uniform_f32`.
    uniform_f32 = ditto_host_uniform_f32(w: u32) -> f32;
    /// `ditto_uniform_f16`, as f16 bits.
    uniform_f16 = ditto_host_uniform_f16(w: u32) -> u16;
    /// `ditto_uniform_bf16`, as bf16 bits.
    uniform_bf16 = ditto_host_uniform_bf16(w: u32) -> u16;
    /// `ditto_uniform_f64`.
    uniform_f64 = ditto_host_uniform_f64(w0: u32, w1: u32) -> f64;
    /// `ditto_below`.
    below = ditto_host_below(w0: u32, w1: u32, range: u64) -> u64;
    /// `ditto_open_uniform_f32`.
    open_uniform_f32 = ditto_host_open_uniform_f32(w: u32) -> f32;
    /// `ditto_scale_uniform_f32`.
    scale_uniform_f32 = ditto_host_scale_uniform_f32(u: f32, low: f32, high: f32) -> f32;
    /// `ditto_scale_normal_f32`.
    scale_normal_f32 = ditto_host_scale_normal_f32(z: f32, mean: f32, std: f32) -> f32;
    /// `ditto_bernoulli`.
    bernoulli = ditto_host_bernoulli(w: u32, p: f32) -> bool;
    /// `ditto_dropout_keep`.
    dropout_keep = ditto_host_dropout_keep(w: u32, p: f32) -> bool;
    /// `ditto_ln`.
    ln = ditto_host_ln(x: f32) -> f32;
}

/// `ditto_sincospi`: `(sin(pi x), cos(pi x))`.
#[must_use]
pub fn sincospi(x: f32) -> (f32, f32) {
    let (mut s, mut c) = (0.0, 0.0);
    // SAFETY: two valid out-pointers.
    unsafe { ffi::ditto_host_sincospi(x, &mut s, &mut c) };
    (s, c)
}

/// `ditto_box_muller` on one pair of words.
#[must_use]
pub fn box_muller(w0: u32, w1: u32) -> (f32, f32) {
    let (mut z0, mut z1) = (0.0, 0.0);
    // SAFETY: two valid out-pointers.
    unsafe { ffi::ditto_host_box_muller(w0, w1, &mut z0, &mut z1) };
    (z0, z1)
}

/// `ditto_ln` over a slice, in one call.
#[must_use]
pub fn ln_many(x: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    // SAFETY: `out` has `x.len()` elements.
    unsafe { ffi::ditto_host_ln_many(x.as_ptr(), out.as_mut_ptr(), x.len()) };
    out
}

/// `ditto_sincospi` over a slice, in one call: `(sines, cosines)`.
#[must_use]
pub fn sincospi_many(x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mut s = vec![0.0; x.len()];
    let mut c = vec![0.0; x.len()];
    // SAFETY: `s` and `c` have `x.len()` elements.
    unsafe { ffi::ditto_host_sincospi_many(x.as_ptr(), s.as_mut_ptr(), c.as_mut_ptr(), x.len()) };
    (s, c)
}
