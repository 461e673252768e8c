//! Faults in device code on the CUDA stand-in (host-executed): a kernel reading past the
//! end of its buffer, or handed freed memory, host memory or another device's memory,
//! and cuBLAS handed an operand (or a strided batch's entry) larger than its buffer.
//! Each must come back as `CUDA_ERROR_ILLEGAL_ADDRESS` (or
//! `CUBLAS_STATUS_EXECUTION_FAILED`), never a crash,
//! and, as on a GPU, leave that device's context unusable (a sticky error) while other
//! devices carry on; ditto then reports typed errors.
//!
//! A fault ruins its device for the rest of the process, so this file is its own test
//! binary and asks the stand-in for one device per test (DITTO_CUDA_STANDIN_DEVICES is
//! set before the first CUDA call). Stand-in only: on a real GPU every test skips.

use crate::support;

use std::sync::Once;

use ditto::tensor_core::cuda::{self, PORTABLE_MATMUL, TENSOR_OPS};
use ditto::tensor_core::cudarc::cublas::sys::{cublasOperation_t, cublasStatus_t};
use ditto::tensor_core::cudarc::cublas::{
    result::CublasError, CudaBlas, Gemm, GemmConfig, StridedBatchedConfig,
};
use ditto::tensor_core::cudarc::driver::sys::CUresult;
use ditto::tensor_core::cudarc::driver::{
    DevicePtr, DeviceRepr, DriverError, LaunchConfig, PushKernelArg,
};
use ditto::tensor_core::{CudaError, DType, Device, Tensor, TensorError};
use support::{gpu, on_standin, STANDIN_LABEL};

/// Devices: one per fault test, plus device 0 which stays healthy.
const DEVICES: usize = 9;

/// True when the stand-in runs this process (with enough devices); skips otherwise.
fn standin() -> bool {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        if std::env::var_os("DITTO_CUDA_STANDIN").is_some() {
            // Before any CUDA call in this process; the real driver ignores the variable.
            std::env::set_var("DITTO_CUDA_STANDIN_DEVICES", DEVICES.to_string());
        }
    });
    if !gpu() {
        return false;
    }
    if !on_standin() {
        println!("skipping: faults are provoked on the {STANDIN_LABEL} only");
        return false;
    }
    assert_eq!(
        cuda::device_count(),
        DEVICES,
        "DITTO_CUDA_STANDIN_DEVICES was read before this test set it"
    );
    true
}

/// The layout of `DittoShape` / `DittoView` (nine u64s) for a hand-made launch.
#[repr(C)]
struct Words9([u64; 9]);
// SAFETY: plain old data with the C layout of the kernel's by-value structs.
unsafe impl DeviceRepr for Words9 {}

const ILLEGAL: DriverError = DriverError(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);

/// Launches `ditto_unary_f32` (out[i] = x[i] + 0 for i < n) on `ordinal` with the given
/// input pointer and element count; the output holds 64 floats. Then synchronises: a
/// fault of the kernel shows at the launch in the stand-in's eager mode and at the
/// synchronisation in its deferred mode, as on a GPU (docs/cuda-standin.md).
fn unary_on(ordinal: usize, x: u64, n: u64) -> Result<(), DriverError> {
    let func = cuda::module_cache::function(ordinal, &TENSOR_OPS, "ditto_unary_f32").unwrap();
    let stream = cuda::default_stream(ordinal).unwrap();
    let mut out = stream.alloc_zeros::<f32>(64).unwrap();
    let (op, a, b) = (3i32, 0f32, 0f32); // 3: add_scalar
    let mut args = stream.launch_builder(&func);
    args.arg(&n).arg(&op).arg(&a).arg(&b).arg(&x).arg(&mut out);
    let cfg = LaunchConfig::for_num_elems(n as u32);
    // SAFETY: deliberately not: `x` and `n` are the fault under test. The stand-in runs
    // the kernel on the host behind guard pages and a fault trap.
    unsafe { args.launch(cfg) }?;
    stream.synchronize()
}

/// The device's context now fails everything with the sticky `ILLEGAL`, and ditto turns
/// that into a typed error; device 0 still works.
fn assert_sticky(ordinal: usize, code: CUresult) {
    assert_eq!(
        cuda::context(ordinal).unwrap().synchronize(),
        Err(DriverError(code))
    );
    let result = Tensor::ones(&[4], DType::F32, Device::Cuda(ordinal));
    assert!(
        matches!(result, Err(TensorError::Cuda(CudaError::Driver { .. }))),
        "{result:?}"
    );
    let healthy = Tensor::ones(&[4], DType::F32, Device::Cuda(0)).unwrap();
    assert_eq!(
        healthy.add(&healthy).unwrap().to_vec::<f32>().unwrap(),
        vec![2.0; 4]
    );
}

#[test]
fn reading_one_element_past_the_end_is_an_illegal_address() {
    test_support::own_process!(reading_one_element_past_the_end_is_an_illegal_address);
    if !standin() {
        return;
    }
    let stream = cuda::default_stream(1).unwrap();
    let x = stream.alloc_zeros::<f32>(37).unwrap();
    let (ptr, _sync) = x.device_ptr(&stream);
    assert_eq!(unary_on(1, ptr, 37), Ok(()));
    assert_eq!(unary_on(1, ptr, 38), Err(ILLEGAL));
    let message = ILLEGAL.to_string();
    assert!(
        message.contains("0 bytes past the end of the 148-byte allocation"),
        "{message}"
    );
    assert_sticky(1, ILLEGAL.0);
}

#[test]
fn freed_memory_as_a_kernel_argument_is_an_illegal_address() {
    test_support::own_process!(freed_memory_as_a_kernel_argument_is_an_illegal_address);
    if !standin() {
        return;
    }
    let stream = cuda::default_stream(2).unwrap();
    let x = stream.alloc_zeros::<f32>(64).unwrap();
    let ptr = {
        let (ptr, _sync) = x.device_ptr(&stream);
        ptr
    };
    drop(x);
    assert_eq!(unary_on(2, ptr, 64), Err(ILLEGAL));
    assert!(ILLEGAL.to_string().contains("freed"), "{ILLEGAL}");
    assert_sticky(2, ILLEGAL.0);
}

#[test]
fn another_devices_memory_as_a_kernel_argument_is_an_illegal_address() {
    test_support::own_process!(another_devices_memory_as_a_kernel_argument_is_an_illegal_address);
    if !standin() {
        return;
    }
    let other = cuda::default_stream(0).unwrap();
    let x = other.alloc_zeros::<f32>(64).unwrap();
    let (ptr, _sync) = x.device_ptr(&other);
    assert_eq!(unary_on(3, ptr, 64), Err(ILLEGAL));
    let message = ILLEGAL.to_string();
    assert!(message.contains("the memory of device 0"), "{message:?}");
    assert_sticky(3, ILLEGAL.0);
}

#[test]
fn host_memory_as_a_kernel_argument_is_an_illegal_address() {
    test_support::own_process!(host_memory_as_a_kernel_argument_is_an_illegal_address);
    if !standin() {
        return;
    }
    let host = vec![1.0f32; 64];
    assert_eq!(unary_on(4, host.as_ptr() as u64, 64), Err(ILLEGAL));
    assert!(
        ILLEGAL.to_string().contains("no device memory"),
        "{ILLEGAL}"
    );
    assert_sticky(4, ILLEGAL.0);
}

#[test]
fn a_gemm_operand_larger_than_its_buffer_fails_and_poisons_the_device() {
    test_support::own_process!(a_gemm_operand_larger_than_its_buffer_fails_and_poisons_the_device);
    if !standin() {
        return;
    }
    let ordinal = 5;
    let stream = cuda::default_stream(ordinal).unwrap();
    cuda::context(ordinal).unwrap().bind_to_thread().unwrap();
    let blas = CudaBlas::new(stream.clone()).unwrap();
    let a = stream.alloc_zeros::<f32>(12).unwrap();
    let b = stream.alloc_zeros::<f32>(11).unwrap(); // k x n = 3 x 4 needs 12
    let mut c = stream.alloc_zeros::<f32>(16).unwrap();
    let cfg = GemmConfig {
        transa: cublasOperation_t::CUBLAS_OP_N,
        transb: cublasOperation_t::CUBLAS_OP_N,
        m: 4,
        n: 4,
        k: 3,
        alpha: 1.0f32,
        lda: 4,
        ldb: 3,
        beta: 0.0,
        ldc: 4,
    };
    // SAFETY: deliberately not (B is one float short); the stand-in checks extents.
    let result = unsafe { blas.gemm(cfg, &a, &b, &mut c) };
    assert_eq!(
        result,
        Err(CublasError(cublasStatus_t::CUBLAS_STATUS_EXECUTION_FAILED))
    );
    assert_sticky(ordinal, ILLEGAL.0);
}

#[test]
fn a_strided_batch_entry_past_its_buffer_fails_and_poisons_the_device() {
    test_support::own_process!(a_strided_batch_entry_past_its_buffer_fails_and_poisons_the_device);
    if !standin() {
        return;
    }
    let ordinal = 8;
    let stream = cuda::default_stream(ordinal).unwrap();
    cuda::context(ordinal).unwrap().bind_to_thread().unwrap();
    let blas = CudaBlas::new(stream.clone()).unwrap();
    // Three entries of 4 x 4 = (4 x 3) (3 x 4), 16 floats of C apart: C holds only two.
    let (a, b) = (
        stream.alloc_zeros::<f32>(12).unwrap(),
        stream.alloc_zeros::<f32>(12).unwrap(),
    );
    let mut c = stream.alloc_zeros::<f32>(32).unwrap();
    let cfg = StridedBatchedConfig {
        gemm: GemmConfig {
            transa: cublasOperation_t::CUBLAS_OP_N,
            transb: cublasOperation_t::CUBLAS_OP_N,
            m: 4,
            n: 4,
            k: 3,
            alpha: 1.0f32,
            lda: 4,
            ldb: 3,
            beta: 0.0,
            ldc: 4,
        },
        batch_size: 3,
        stride_a: 0,
        stride_b: 0,
        stride_c: 16,
    };
    // SAFETY: deliberately not (the third entry of C is past the buffer); the stand-in
    // checks every entry's extents.
    let result = unsafe { blas.gemm_strided_batched(cfg, &a, &b, &mut c) };
    assert_eq!(
        result,
        Err(CublasError(cublasStatus_t::CUBLAS_STATUS_EXECUTION_FAILED))
    );
    assert_sticky(ordinal, ILLEGAL.0);
}

#[test]
fn a_kernel_dividing_by_zero_fails_the_launch() {
    test_support::own_process!(a_kernel_dividing_by_zero_fails_the_launch);
    if !standin() {
        return;
    }
    // A gather over a shape with a zero dimension but n = 4 elements: ditto_position
    // takes `i % 0`. A GPU returns some value; the host traps, and the stand-in reports it.
    let ordinal = 6;
    let func = cuda::module_cache::function(ordinal, &TENSOR_OPS, "ditto_gather_32").unwrap();
    let stream = cuda::default_stream(ordinal).unwrap();
    let src = stream.alloc_zeros::<f32>(4).unwrap();
    let mut dst = stream.alloc_zeros::<f32>(4).unwrap();
    let shape = Words9([1, 0, 0, 0, 0, 0, 0, 0, 0]); // DittoShape: rank 1, dims [0]
    let view = Words9([0, 1, 0, 0, 0, 0, 0, 0, 0]); // DittoView: offset 0, strides [1]
    let n = 4u64;
    let mut args = stream.launch_builder(&func);
    args.arg(&n).arg(&shape).arg(&view).arg(&src).arg(&mut dst);
    // SAFETY: deliberately not: the shape is the fault under test.
    // The fault shows at the launch (eager mode) or at the synchronisation (deferred).
    let result = unsafe { args.launch(LaunchConfig::for_num_elems(4)) }
        .map(|_| ())
        .and_then(|()| stream.synchronize());
    assert_eq!(result, Err(DriverError(CUresult::CUDA_ERROR_LAUNCH_FAILED)));
    assert_sticky(ordinal, CUresult::CUDA_ERROR_LAUNCH_FAILED);
}

/// Launches the portable matmul (a kernel whose blocks synchronise, run as fibers) for
/// 64 x 64 x 64 row-major operands at `a` and `b` on `ordinal`.
fn portable_matmul_on(ordinal: usize, a: u64, b: u64) -> Result<Vec<f32>, DriverError> {
    let func = cuda::module_cache::function(ordinal, &PORTABLE_MATMUL, "ditto_portable_matmul_f32")
        .unwrap();
    let stream = cuda::default_stream(ordinal).unwrap();
    let mut c = stream.alloc_zeros::<f32>(64 * 64).unwrap();
    let (size, zero, row, col) = (64u64, 0u64, 64u64, 1u64);
    let mut args = stream.launch_builder(&func);
    args.arg(&size).arg(&size).arg(&size);
    args.arg(&a).arg(&zero).arg(&row).arg(&col);
    args.arg(&b).arg(&zero).arg(&row).arg(&col);
    args.arg(&mut c);
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (16, 16, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: deliberately not, in the faulting case: `a` may be one element short.
    unsafe { args.launch(cfg) }?;
    // A deferred fault (docs/cuda-standin.md) shows here, at the copy that waits for it.
    stream.clone_dtoh(&c)
}

#[test]
fn a_fault_in_a_synchronising_kernel_is_reported_and_releases_its_lock() {
    test_support::own_process!(a_fault_in_a_synchronising_kernel_is_reported_and_releases_its_lock);
    if !standin() {
        return;
    }
    let ordinal = 7;
    let stream = cuda::default_stream(ordinal).unwrap();
    let short = stream.alloc_zeros::<f32>(64 * 64 - 1).unwrap();
    let full = stream.alloc_zeros::<f32>(64 * 64).unwrap();
    let (a, _sync_a) = short.device_ptr(&stream);
    let (b, _sync_b) = full.device_ptr(&stream);
    assert_eq!(portable_matmul_on(ordinal, a, b), Err(ILLEGAL));
    let message = ILLEGAL.to_string();
    assert!(
        message.contains("past the end of the 16380-byte allocation"),
        "{message}"
    );
    assert_sticky(ordinal, ILLEGAL.0);
    // The block-kernel lock was released: the same kernel runs on a healthy device.
    let healthy = cuda::default_stream(0).unwrap();
    let ones = healthy.clone_htod(&vec![1.0f32; 64 * 64]).unwrap();
    let (p, _sync_p) = ones.device_ptr(&healthy);
    assert_eq!(portable_matmul_on(0, p, p), Ok(vec![64.0; 64 * 64]));
}
