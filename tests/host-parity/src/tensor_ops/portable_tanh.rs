//! ditto's portable f32 `tanh` from the CUDA header (`ditto_portable_tanh` in
//! `cuda/portable_math.cuh`, GELU's building block), compiled for the host, so the
//! parity tests can hold it against [`tensor_core::portable::math::tanh`] bit for bit on any
//! machine, as they hold `exp` and `log`.

mod ffi {
    extern "C" {
        pub fn ditto_host_portable_tanh(n: u64, x: *const f32, out: *mut f32);
    }
}

/// `tanh` of every element of `x`, by the CUDA header's routine.
#[must_use]
pub fn portable_tanh(x: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len()];
    // SAFETY: `x` and `out` both hold `x.len()` elements.
    unsafe { ffi::ditto_host_portable_tanh(x.len() as u64, x.as_ptr(), out.as_mut_ptr()) };
    out
}
