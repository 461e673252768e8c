//! Helpers shared by the integration tests (each test file includes this module).
#![allow(dead_code)]

use rng_gen::{Generator, Key, RngError};
use tensor_core::{Device, Tensor};

/// A CPU generator at `(seed, offset)`.
pub fn generator(seed: u64, offset: u64) -> Generator {
    Generator::from_key(Device::Cpu, Key { seed, offset })
}

/// Runs `op` with a fresh CPU generator at `(1, 10)`, expects it to refuse its input, and
/// checks the refusal did not move the generator (a rejected call consumes no
/// randomness); returns the error.
pub fn rejected<T: std::fmt::Debug>(
    op: impl FnOnce(&Generator) -> Result<T, RngError>,
) -> RngError {
    let g = generator(1, 10);
    let err = op(&g).expect_err("bad input was accepted");
    assert_eq!(
        g.offset(),
        10,
        "a rejected call moved the generator ({err})"
    );
    err
}

/// Word `w` of the op whose base block is `base`, straight from the engine.
pub fn word(seed: u64, base: u64, w: u64) -> u32 {
    rng_gen::stream::philox::word_at(seed, base, w)
}

/// Distance in units in the last place between two finite f32 of any sign.
pub fn ulp_distance(a: f32, b: f32) -> u64 {
    fn ordered(x: f32) -> i64 {
        let bits = i64::from(x.to_bits() as i32);
        if bits < 0 {
            i64::from(i32::MIN) - bits
        } else {
            bits
        }
    }
    ordered(a).abs_diff(ordered(b))
}

/// The values of a CPU tensor.
pub fn values<T: tensor_core::Element>(t: &Tensor) -> Vec<T> {
    t.to_vec::<T>().expect("tensor of the expected dtype")
}
