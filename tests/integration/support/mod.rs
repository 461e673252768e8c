//! Helpers shared by the integration tests: whether a GPU test can run, deterministic
//! test data, and bit-for-bit comparison of tensors.
// Each test file uses only some of these.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

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
        None => {
            announce_device();
            true
        }
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

/// Which elements are NaN (none, for integer dtypes).
fn nan_mask(t: &Tensor) -> Vec<bool> {
    if !t.dtype().is_float() {
        return vec![false; t.elem_count()];
    }
    let t = t.to_device(Device::Cpu).unwrap();
    let wide = t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    wide.into_iter().map(f64::is_nan).collect()
}

/// `got` has `want`'s dims, dtype and every element's bits, except that any NaN equals
/// any NaN. IEEE 754 leaves the sign and payload of a NaN an operation creates to the
/// hardware: `0.0 / 0.0` is `0xffc00000` on x86, `0x7fffffff` on an NVIDIA GPU (seen on
/// an H100) and `0x7fc00000` on Arm. ditto's contract covers values, and "not a number"
/// is the value; the random ops never produce NaN, so for them this is plain bit equality.
pub fn assert_same(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.dims(), want.dims(), "{what}: shape");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    let (g, w) = (bits_of(got), bits_of(want));
    let (g_nan, w_nan) = (nan_mask(got), nan_mask(want));
    if let Some(i) = (0..g.len()).find(|&i| g[i] != w[i] && !(g_nan[i] && w_nan[i])) {
        panic!(
            "{what}: element {i} of {}: bits {:#x}, expected {:#x}",
            g.len(),
            g[i],
            w[i]
        );
    }
}

/// The label every result from the host-executed CUDA stand-in carries (docs/cuda-standin.md).
pub const STANDIN_LABEL: &str = "CUDA stand-in (host-executed)";

/// True when device 0 is the CUDA stand-in rather than a GPU: its driver says so in the
/// device name. Results are then labelled [`STANDIN_LABEL`], never GPU results.
pub fn on_standin() -> bool {
    cuda::get_device_name(0).is_ok_and(|name| name.contains(STANDIN_LABEL))
}

/// Prints (once per test binary) where GPU results come from: the stand-in or a GPU.
fn announce_device() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let names: Vec<String> = (0..cuda::device_count())
            .map(|i| cuda::get_device_name(i).unwrap_or_else(|e| e.to_string()))
            .collect();
        if on_standin() {
            println!("results from the {STANDIN_LABEL}, not a GPU: {names:?}");
        } else {
            println!("GPU results from {names:?}");
        }
    });
}

/// True when a test needing `n` CUDA devices can run; otherwise prints why it skipped.
/// Skipping fails under `REQUIRE_GPU=1` when there is no GPU at all, and under
/// `REQUIRE_GPUS=<k>` (k >= n) when fewer than `n` devices exist: CI runs the
/// multi-device tests on the stand-in's two devices with both set.
pub fn gpus(n: usize) -> bool {
    if !gpu() {
        return false;
    }
    let count = cuda::device_count();
    if count >= n {
        return true;
    }
    let required = std::env::var("REQUIRE_GPUS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    assert!(
        required < n,
        "REQUIRE_GPUS={required} but this test needs {n} CUDA devices and {count} exist"
    );
    println!("skipping: needs {n} CUDA devices, {count} present");
    false
}

/// Runs the test `test` of this test binary again, alone, in a child process whose
/// library path starts at `library_dir` and which has `env` set; panics with the child's
/// output unless that test passed there. The CUDA driver is loaded once per process, so
/// a test of another driver build (the stand-in's half-installed variant, or a stand-in
/// with a manifest of the test's own) runs its checks in a child.
pub fn run_test_in_child(test: &str, library_dir: &std::path::Path, env: (&str, &str)) {
    let path = format!(
        "{}:{}",
        library_dir.display(),
        std::env::var("LD_LIBRARY_PATH").unwrap_or_default()
    );
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env(env.0, env.1)
        .env("LD_LIBRARY_PATH", path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && text.contains("1 passed"),
        "child process ({}={}):\n{text}",
        env.0,
        env.1
    );
}

/// The path of example `name`, built for this test's profile and features by `cargo
/// build --workspace --example name` (once per process).
///
/// Why `--workspace` and the `ditto/` feature names: cargo unifies features over the
/// packages a command selects, so a build of the facade alone asks for other feature sets
/// of the member crates (no member's `default`, no dev-dependency features) than `cargo
/// test --workspace` did, and rebuilt every member crate inside the test run (about 90 s
/// of the README's test command on two cores). Selecting the whole workspace, with this
/// binary's own features, asks for what the outer `cargo test --workspace` built, so the
/// build finds everything fresh; a narrower outer command (`-p ditto`) pays one build.
pub fn example(name: &str) -> PathBuf {
    static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = built.get_or_insert_with(HashMap::new).get(name) {
        return path.clone();
    }
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo
        .args(["build", "--quiet", "--workspace", "--example", name])
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"));
    if !cfg!(debug_assertions) {
        cargo.arg("--release");
    }
    if !cfg!(feature = "default") {
        cargo.arg("--no-default-features");
    }
    let features: Vec<&str> = [
        ("ditto/cuda", cfg!(feature = "cuda")),
        ("ditto/mpi", cfg!(feature = "mpi")),
        ("ditto/nccl", cfg!(feature = "nccl")),
    ]
    .into_iter()
    .filter_map(|(f, on)| on.then_some(f))
    .collect();
    if !features.is_empty() {
        cargo.args(["--features", &features.join(",")]);
    }
    let status = cargo.status().expect("run cargo build");
    assert!(status.success(), "cargo build --example {name} failed");
    // This test runs from <target>/<profile>/deps; the examples are built beside it.
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(path.is_file(), "{} was not built", path.display());
    built.as_mut().unwrap().insert(name.into(), path.clone());
    path
}
