//! Device memory during a CUDA graph capture (issue 33, item 3), on the CUDA stand-in
//! with a small device (DITTO_CUDA_STANDIN_MEMORY_MB): running out of memory inside a
//! capture is a typed out-of-memory error naming the capture, `empty_cache` during a
//! capture is refused, the allocator's statistics stay equal to what the driver holds,
//! and eager work afterwards still runs (and may then empty the cache to fit). And a
//! captured matmul allocates nothing: cuBLAS has the workspace ditto set, so the graph
//! holds no allocation of its own and can be replayed (issue 33, item 2).
//!
//! Why it matters: emptying the cache frees blocks with stream-ordered frees on the
//! device's stream, which a capture would record; the driver refuses them there and
//! invalidates the capture, and the blocks stay allocated while the statistics count
//! them as given back.
//!
//! The memory size must be set before the first CUDA call of the process, so each test
//! runs in a process of its own (`own_process!`). Stand-in only: on a real GPU every test skips.

use crate::support;

use std::sync::Once;

use ditto::tensor_core::cuda::{self, empty_cache, memory_reserved, memory_stats, CudaGraph};
use ditto::tensor_core::{DType, Device, Tensor, TensorError};
use support::{gpu, on_standin, STANDIN_LABEL};

const GPU: Device = Device::Cuda(0);
/// Each stand-in device's memory in this process.
const MEMORY_MB: usize = 96;
/// Elements of a 24 MiB f32 tensor: two fit the device beside cuBLAS's 32 MiB workspace,
/// three do not.
const BIG: usize = 6 << 20;

/// True when the stand-in runs this process with [`MEMORY_MB`] per device.
fn standin() -> bool {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        if std::env::var_os("DITTO_CUDA_STANDIN").is_some() {
            // Before any CUDA call in this process; the real driver ignores the variable.
            std::env::set_var("DITTO_CUDA_STANDIN_MEMORY_MB", MEMORY_MB.to_string());
        }
    });
    if !gpu() {
        return false;
    }
    if !on_standin() {
        println!("skipping: the device's memory is sized on the {STANDIN_LABEL} only");
        return false;
    }
    // cuBLAS's handle and workspace are made at the first matmul and kept: make them
    // first, so every test counts memory with them in place.
    let a = Tensor::ones(&[2, 2], DType::F32, GPU).unwrap();
    a.matmul(&a).unwrap();
    true
}

/// A capture claims the whole device, so this file's tests take turns (from before
/// [`standin`], whose matmul must not land in another test's capture).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Bytes of device 0 the driver has handed out and not taken back (`cuMemGetInfo`).
fn driver_holds() -> u64 {
    cuda::context(0).unwrap().bind_to_thread().unwrap();
    let (free, total) = ditto::tensor_core::cudarc::driver::result::mem_get_info().unwrap();
    (total - free) as u64
}

/// The allocator's statistics say what the driver holds: nothing leaked, nothing
/// counted as freed that was not. (The stand-in's size classes are exact, so the two
/// count the same bytes.)
fn assert_statistics_true(when: &str) {
    cuda::synchronize(0).unwrap();
    assert_eq!(
        memory_reserved(0),
        driver_holds(),
        "{when}: the allocator's reserved bytes and the driver's"
    );
}

/// Leaves `n` blocks of [`BIG`] f32 elements in the cache.
fn cache_big_blocks(n: usize) {
    let blocks: Vec<Tensor> = (0..n)
        .map(|_| Tensor::zeros(&[BIG], DType::F32, GPU).unwrap())
        .collect();
    std::mem::drop(blocks);
}

#[test]
fn out_of_memory_in_a_capture_is_typed_and_keeps_the_cache() {
    test_support::own_process!(out_of_memory_in_a_capture_is_typed_and_keeps_the_cache);
    let _turn = serial();
    if !standin() {
        return;
    }
    cache_big_blocks(2);
    assert_statistics_true("before the capture");
    let before = memory_stats(0);
    assert!(before.cached_bytes >= 2 * 4 * BIG as u64, "{before:?}");
    // A block of another size class: the cache cannot serve it and the driver has no
    // room for it beside the cached blocks.
    let err = CudaGraph::capture(0, || Tensor::zeros(&[BIG + 1], DType::F32, GPU))
        .map(|_| ())
        .unwrap_err();
    match &err {
        TensorError::CaptureOutOfMemory {
            ordinal: 0,
            dtype: DType::F32,
            elements,
            cached_bytes,
            ..
        } => {
            assert_eq!(*elements, BIG + 1, "{err}");
            assert_eq!(*cached_bytes, before.cached_bytes, "{err}");
        }
        other => panic!("expected an out-of-memory error naming the capture, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("out of memory") && message.contains("graph capture"),
        "{message}"
    );
    let after = memory_stats(0);
    assert_eq!(
        (after.cached_bytes, after.driver_frees),
        (before.cached_bytes, before.driver_frees),
        "a capture gives nothing back to the driver"
    );
    assert_statistics_true("after the failed capture");

    // An eager step still works: it needs the cache emptied, which it may do now.
    let x = Tensor::ones(&[BIG + 1], DType::F32, GPU).unwrap();
    let y = x.add(&x).unwrap();
    let sum: f64 = y
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|&v| f64::from(v))
        .sum();
    assert_eq!(sum, 2.0 * (BIG + 1) as f64);
    assert!(memory_stats(0).driver_frees > before.driver_frees);
    std::mem::drop((x, y));
    assert_statistics_true("after the eager step");

    // And so does a later capture.
    let x = Tensor::ones(&[8], DType::F32, GPU).unwrap();
    let (graph, y) = CudaGraph::capture(0, || x.add_scalar(1.0)).unwrap();
    graph.replay().unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![2.0; 8]);
    std::mem::drop((graph, x, y));
    empty_cache(0).unwrap();
    assert_statistics_true("at the end");
}

#[test]
fn empty_cache_during_a_capture_is_refused() {
    test_support::own_process!(empty_cache_during_a_capture_is_refused);
    let _turn = serial();
    if !standin() {
        return;
    }
    cache_big_blocks(1);
    let before = memory_stats(0);
    assert!(before.cached_bytes > 0);
    // empty_cache is the runtime's: its refusal is a CudaError::Capture.
    let refused = |e: &ditto::tensor_core::cuda::CudaError| {
        matches!(
            e,
            ditto::tensor_core::cuda::CudaError::Capture {
                ordinal: 0,
                op: "empty_cache",
                ..
            }
        )
    };
    // From the capturing thread, and from another thread meanwhile.
    let x = Tensor::ones(&[8], DType::F32, GPU).unwrap();
    let mut from_other_thread = None;
    let (graph, y) = CudaGraph::capture(0, || {
        let y = x.add_scalar(1.0)?;
        let here = empty_cache(0).unwrap_err();
        assert!(refused(&here), "{here}");
        from_other_thread = Some(std::thread::scope(|s| {
            s.spawn(|| empty_cache(0)).join().unwrap()
        }));
        Ok(y)
    })
    .unwrap();
    let other = from_other_thread.unwrap().unwrap_err();
    assert!(refused(&other), "{other}");
    // The capture was not disturbed, and the cache is as it was.
    graph.replay().unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![2.0; 8]);
    let after = memory_stats(0);
    assert_eq!(
        (after.cached_bytes, after.driver_frees),
        (before.cached_bytes, before.driver_frees)
    );
    assert_statistics_true("after the refusals");
    // After the capture it works.
    std::mem::drop((graph, x, y));
    empty_cache(0).unwrap();
    assert_eq!(memory_stats(0).cached_bytes, 0);
    assert_statistics_true("after empty_cache");
}

/// Without a workspace of its own, cuBLAS (12.2 and later; the stand-in models it)
/// allocates one when a gemm is captured: memory the graph holds beyond the allocator's
/// statistics, and a graph the driver would relaunch only with auto-free-on-launch.
#[test]
fn a_captured_matmul_uses_the_workspace_ditto_set() {
    test_support::own_process!(a_captured_matmul_uses_the_workspace_ditto_set);
    let _turn = serial();
    if !standin() {
        return;
    }
    let a = Tensor::from_vec(vec![1f32, 2., 3., 4.], &[2, 2], GPU).unwrap();
    let (graph, product) = CudaGraph::capture(0, || a.matmul(&a)).unwrap();
    assert_statistics_true("with the graph of a matmul");
    for _ in 0..3 {
        graph.replay().unwrap();
    }
    assert_eq!(product.to_vec::<f32>().unwrap(), vec![7., 10., 15., 22.]);
    std::mem::drop(graph);
    assert_statistics_true("after the graph");
}
