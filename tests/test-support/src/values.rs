//! Test inputs whose sums show any change of order in their last bits.

/// `n` deterministic f32 values from `seed`, over exponents 2^-5..2^4 and both signs (a
/// small xorshift): with every kind of rounding in a sum, so that a kernel that reorders
/// its additions gives different bits.
#[must_use]
pub fn spread_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let mantissa = (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            mantissa * f32::powi(2.0, ((s >> 8) % 9) as i32 - 4)
        })
        .collect()
}
