//! Helpers shared by the integration tests: whether a GPU test can run, deterministic
//! test data, and bit-for-bit comparison of tensors.
// Each test file uses only some of these.
#![allow(dead_code)]

use ditto::tensor_core::cuda;
use ditto::tensor_core::{bf16, f16, DType, Device, Tensor};

/// Why no GPU test can run here (no driver, no device, or no NVRTC to compile ditto's
/// kernels), or `None` when one can.
pub fn no_gpu_reason() -> Option<String> {
    if !cuda::is_available() {
        return Some(match cuda::context(0) {
            Err(e) => e.to_string(),
            Ok(_) => "no CUDA device".into(),
        });
    }
    cuda::nvrtc::ensure_available().err().map(|e| e.to_string())
}

/// True when a GPU test can run; otherwise prints `skipping: <reason>` and returns false,
/// or fails under `REQUIRE_GPU=1` (how the GPU machines run them, see
/// `scripts/gpu_bundle.sh`).
pub fn gpu() -> bool {
    match no_gpu_reason() {
        None => true,
        Some(reason) => {
            assert!(
                std::env::var("REQUIRE_GPU").as_deref() != Ok("1"),
                "REQUIRE_GPU=1 but no GPU test can run: {reason}"
            );
            println!("skipping: {reason}");
            false
        }
    }
}

/// Deterministic values in [-2, 2) (no RNG involved), with exact zeros and repeated
/// values (ties) mixed in; with `nans`, also one NaN in about 97. GPU arithmetic may
/// change a NaN's payload, so tests that compare arithmetic bit for bit on a GPU use
/// `nans = false`.
pub fn values(n: usize, salt: u64, nans: bool) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let h = (i ^ salt)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(17);
            match h % 97 {
                0 if nans => f32::NAN,
                0..=7 => 0.0,
                8..=12 => 1.5,
                _ => (h >> 40) as f32 / (1u64 << 22) as f32 - 2.0,
            }
        })
        .collect()
}

/// A CPU tensor of `dims` filled with [`values`] (no NaN).
pub fn cpu_tensor(dims: &[usize], salt: u64) -> Tensor {
    Tensor::from_vec(
        values(dims.iter().product(), salt, false),
        dims,
        Device::Cpu,
    )
    .unwrap()
}

/// Every element's bits, whatever the dtype and device, for bitwise comparison.
pub fn bits_of(t: &Tensor) -> Vec<u64> {
    let t = t.to_device(Device::Cpu).unwrap();
    fn widen<T: ditto::tensor_core::Element>(t: &Tensor, f: impl Fn(T) -> u64) -> Vec<u64> {
        t.to_vec::<T>().unwrap().into_iter().map(f).collect()
    }
    match t.dtype() {
        DType::F32 => widen(&t, |v: f32| v.to_bits().into()),
        DType::F64 => widen(&t, f64::to_bits),
        DType::F16 => widen(&t, |v: f16| v.to_bits().into()),
        DType::BF16 => widen(&t, |v: bf16| v.to_bits().into()),
        DType::I64 => widen(&t, |v: i64| v as u64),
        DType::U32 => widen(&t, |v: u32| v.into()),
        DType::U8 => widen(&t, |v: u8| v.into()),
        DType::Bool => widen(&t, |v: bool| v.into()),
    }
}

/// `got` has `want`'s dims, dtype and every element's bits.
pub fn assert_same(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.dims(), want.dims(), "{what}: shape");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    let (g, w) = (bits_of(got), bits_of(want));
    if let Some(i) = (0..g.len()).find(|&i| g[i] != w[i]) {
        panic!(
            "{what}: element {i} of {}: bits {:#x}, expected {:#x}",
            g.len(),
            g[i],
            w[i]
        );
    }
}
