//! The C ABI of `crates/kernels/host/parity_shim.cpp`. f16 / bf16 buffers are passed as
//! `tensor_core::{f16, bf16}`, which are `repr(transparent)` over the `u16` bit patterns
//! the C side uses.

use tensor_core::{bf16, f16};

/// Declares uniform / normal block bodies for one element type.
macro_rules! sample_ops {
    ($t:ty, $uniform:ident, $normal:ident) => {
        extern "C" {
            pub fn $uniform(
                seed: u64,
                offset: u64,
                block: u64,
                n: u64,
                low: f32,
                high: f32,
                out: *mut $t,
            );
            pub fn $normal(
                seed: u64,
                offset: u64,
                block: u64,
                n: u64,
                mean: f32,
                std: f32,
                out: *mut $t,
            );
        }
    };
}

/// Declares bernoulli / dropout block bodies for one element type.
macro_rules! elementwise_ops {
    ($t:ty, $bernoulli:ident, $dropout:ident, $backward:ident) => {
        extern "C" {
            pub fn $bernoulli(seed: u64, offset: u64, block: u64, n: u64, p: f32, out: *mut $t);
            pub fn $dropout(
                seed: u64,
                offset: u64,
                block: u64,
                n: u64,
                p: f32,
                scale: f32,
                x: *const $t,
                y: *mut $t,
            ) -> u32;
            pub fn $backward(
                block: u64,
                n: u64,
                scale: f32,
                mask: *const u32,
                grad: *const $t,
                grad_in: *mut $t,
            );
        }
    };
}

extern "C" {
    pub fn ditto_host_philox(counter: *const u32, k0: u32, k1: u32, out: *mut u32);
    pub fn ditto_host_block_words(seed: u64, block: u64, out: *mut u32);
    pub fn ditto_host_f32_to_f16(x: f32) -> u16;
    pub fn ditto_host_f16_to_f32(h: u16) -> f32;
    pub fn ditto_host_f32_to_bf16(x: f32) -> u16;
    pub fn ditto_host_bf16_to_f32(b: u16) -> f32;
    pub fn ditto_host_uniform_f32(w: u32) -> f32;
    pub fn ditto_host_uniform_f16(w: u32) -> u16;
    pub fn ditto_host_uniform_bf16(w: u32) -> u16;
    pub fn ditto_host_uniform_f64(w0: u32, w1: u32) -> f64;
    pub fn ditto_host_below(w0: u32, w1: u32, range: u64) -> u64;
    pub fn ditto_host_open_uniform_f32(w: u32) -> f32;
    pub fn ditto_host_scale_uniform_f32(u: f32, low: f32, high: f32) -> f32;
    pub fn ditto_host_scale_normal_f32(z: f32, mean: f32, std: f32) -> f32;
    pub fn ditto_host_bernoulli(w: u32, p: f32) -> bool;
    pub fn ditto_host_dropout_keep(w: u32, p: f32) -> bool;
    pub fn ditto_host_ln(x: f32) -> f32;
    pub fn ditto_host_sincospi(x: f32, s: *mut f32, c: *mut f32);
    pub fn ditto_host_box_muller(w0: u32, w1: u32, z0: *mut f32, z1: *mut f32);
    pub fn ditto_host_ln_many(x: *const f32, out: *mut f32, n: usize);
    pub fn ditto_host_sincospi_many(x: *const f32, s: *mut f32, c: *mut f32, n: usize);
    pub fn ditto_host_bits_block(seed: u64, offset: u64, block: u64, n: u64, out: *mut u32);
    pub fn ditto_host_bernoulli_block_u8(
        seed: u64,
        offset: u64,
        block: u64,
        n: u64,
        p: f32,
        out: *mut u8,
    );
    pub fn ditto_host_uniform_f64_block(
        seed: u64,
        offset: u64,
        block: u64,
        n: u64,
        low: f64,
        high: f64,
        out: *mut f64,
    );
    pub fn ditto_host_dropout_mask_word(seed: u64, offset: u64, word: u64, n: u64, p: f32) -> u32;
    pub fn ditto_host_randint_block(
        seed: u64,
        offset: u64,
        block: u64,
        n: u64,
        low: i64,
        range: u64,
        out: *mut i64,
    );
}

sample_ops!(
    f32,
    ditto_host_uniform_block_f32,
    ditto_host_normal_block_f32
);
sample_ops!(
    f16,
    ditto_host_uniform_block_f16,
    ditto_host_normal_block_f16
);
sample_ops!(
    bf16,
    ditto_host_uniform_block_bf16,
    ditto_host_normal_block_bf16
);

elementwise_ops!(
    f32,
    ditto_host_bernoulli_block_f32,
    ditto_host_dropout_block_f32,
    ditto_host_dropout_backward_mask_block_f32
);
elementwise_ops!(
    f16,
    ditto_host_bernoulli_block_f16,
    ditto_host_dropout_block_f16,
    ditto_host_dropout_backward_mask_block_f16
);
elementwise_ops!(
    bf16,
    ditto_host_bernoulli_block_bf16,
    ditto_host_dropout_block_bf16,
    ditto_host_dropout_backward_mask_block_bf16
);
elementwise_ops!(
    f64,
    ditto_host_bernoulli_block_f64,
    ditto_host_dropout_block_f64,
    ditto_host_dropout_backward_mask_block_f64
);
