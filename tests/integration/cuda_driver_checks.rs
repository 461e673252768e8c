//! The CUDA driver behaviours ditto relies on, checked through cudarc's raw calls:
//! launch limits, error names and strings (cuBLAS's gemms are in `cuda_gemm_checks.rs`).
//! They hold on a real GPU and on the CUDA stand-in (host-executed) alike, so a GPU run
//! of this file also checks that the stand-in imitates the driver where these tests look.
//!
//! Tests named `standin_*` check what only the stand-in promises (copies checked byte
//! for byte against their allocation, unimplemented calls naming themselves, every PTX
//! entry resolving to a host build, devices that differ); they skip on a real GPU. Faults
//! that leave a context unusable are in `cuda_standin_faults.rs`, a process of their own.

use crate::support;

use std::ffi::CStr;

use ditto::kernels::nvrtc::{ATTENTION_SOURCE, RANDOM_SOURCE};
use ditto::tensor_core::cuda::{self, nvrtc, CudaSource, TENSOR_OPS};
use ditto::tensor_core::cudarc::driver::sys::{self, CUresult};
use ditto::tensor_core::cudarc::driver::{DevicePtr, DriverError, LaunchConfig, PushKernelArg};
use ditto::tensor_core::CudaError;
use support::{gpu, gpus, on_standin, run_test_in_child, STANDIN_LABEL};

/// True when this stand-in-only test can run; prints why not otherwise.
fn standin() -> bool {
    if !gpu() {
        return false;
    }
    if !on_standin() {
        println!("skipping: checks the {STANDIN_LABEL} only; this is a real GPU");
        return false;
    }
    true
}

fn launch_unary(block: (u32, u32, u32), grid: (u32, u32, u32)) -> Result<(), DriverError> {
    let func = cuda::module_cache::function(0, &TENSOR_OPS, "ditto_unary_f32").unwrap();
    let stream = cuda::default_stream(0).unwrap();
    let x = stream.alloc_zeros::<f32>(4).unwrap();
    let mut y = stream.alloc_zeros::<f32>(4).unwrap();
    let (n, op, a, b) = (4u64, 0i32, 0f32, 0f32);
    let mut args = stream.launch_builder(&func);
    args.arg(&n).arg(&op).arg(&a).arg(&b).arg(&x).arg(&mut y);
    let cfg = LaunchConfig {
        grid_dim: grid,
        block_dim: block,
        shared_mem_bytes: 0,
    };
    // SAFETY: ditto_unary_f32(u64 n, int op, float a, float b, const float* x, float* out)
    // with n = 4 and two buffers of 4 floats.
    unsafe { args.launch(cfg) }?;
    stream.synchronize()
}

#[test]
fn launches_outside_the_drivers_limits_are_refused() {
    if !gpu() {
        return;
    }
    let invalid = DriverError(CUresult::CUDA_ERROR_INVALID_VALUE);
    for (block, grid) in [
        ((2048, 1, 1), (1, 1, 1)),   // more than 1024 threads per block
        ((1024, 2, 1), (1, 1, 1)),   // 2048 threads in two dimensions
        ((1, 1, 65), (1, 1, 1)),     // block z above 64
        ((0, 1, 1), (1, 1, 1)),      // an empty block
        ((32, 1, 1), (0, 1, 1)),     // an empty grid
        ((32, 1, 1), (1, 65536, 1)), // grid y above 65535
    ] {
        assert_eq!(
            launch_unary(block, grid),
            Err(invalid),
            "block {block:?} grid {grid:?}"
        );
    }
    // A refused launch leaves the context usable; the limits themselves are allowed.
    for (block, grid) in [
        ((1024, 1, 1), (1, 1, 1)),
        ((8, 8, 16), (3, 2, 1)),
        ((1, 1, 64), (1, 1, 65535)),
    ] {
        assert_eq!(
            launch_unary(block, grid),
            Ok(()),
            "block {block:?} grid {grid:?}"
        );
    }
}

#[test]
fn error_names_and_strings_come_from_the_driver() {
    if !gpu() {
        return;
    }
    let name = DriverError(CUresult::CUDA_ERROR_NOT_SUPPORTED)
        .error_name()
        .unwrap();
    assert_eq!(name.to_str().unwrap(), "CUDA_ERROR_NOT_SUPPORTED");
    let text = DriverError(CUresult::CUDA_ERROR_INVALID_VALUE)
        .error_string()
        .unwrap();
    assert!(!text.to_bytes().is_empty());
    let sticky = DriverError(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS)
        .error_name()
        .unwrap();
    assert_eq!(sticky.to_str().unwrap(), "CUDA_ERROR_ILLEGAL_ADDRESS");
}

#[test]
fn standin_copies_and_memsets_stay_inside_their_allocation() {
    if !standin() {
        return;
    }
    let stream = cuda::default_stream(0).unwrap();
    let buffer = stream.alloc_zeros::<u8>(16).unwrap();
    let (base, _sync) = buffer.device_ptr(&stream);
    let host = [7u8; 32];
    let mut back = [0u8; 32];
    let invalid = CUresult::CUDA_ERROR_INVALID_VALUE;
    // SAFETY: every call passes host buffers of 32 bytes; the device ranges are what is
    // under test, and the stand-in refuses the bad ones before touching memory.
    unsafe {
        assert_eq!(
            sys::cuMemcpyHtoD_v2(base, host.as_ptr().cast(), 16),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuMemcpyHtoD_v2(base + 4, host.as_ptr().cast(), 12),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuMemcpyHtoD_v2(base, host.as_ptr().cast(), 17),
            invalid
        );
        let message = DriverError(invalid).to_string();
        assert!(
            message.contains(STANDIN_LABEL) && message.contains("overrun"),
            "{message}"
        );
        assert_eq!(
            sys::cuMemcpyHtoD_v2(base + 8, host.as_ptr().cast(), 9),
            invalid
        );
        assert_eq!(
            sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), base + 1, 16),
            invalid
        );
        assert_eq!(sys::cuMemsetD8_v2(base + 15, 0, 2), invalid);
        assert_eq!(sys::cuMemsetD32_v2(base, 0, 5), invalid);
        assert_eq!(sys::cuMemcpyDtoD_v2(base, base + 8, 9), invalid);
        // A device pointer where host memory belongs.
        assert_eq!(sys::cuMemcpyDtoH_v2(base as *mut _, base, 4), invalid);
    }
    // Freed memory and pointers that are not device memory.
    let mut raw = 0;
    // SAFETY: out-pointer valid; the context is current (the stream's calls bound it).
    unsafe {
        assert_eq!(sys::cuMemAlloc_v2(&mut raw, 64), CUresult::CUDA_SUCCESS);
        assert_eq!(sys::cuMemFree_v2(raw), CUresult::CUDA_SUCCESS);
        assert_eq!(sys::cuMemFree_v2(raw), invalid);
        assert_eq!(sys::cuMemcpyHtoD_v2(raw, host.as_ptr().cast(), 4), invalid);
        assert_eq!(
            sys::cuMemcpyHtoD_v2(host.as_ptr() as u64, host.as_ptr().cast(), 4),
            invalid
        );
        assert_eq!(sys::cuMemFree_v2(base + 4), invalid);
        assert!(DriverError(invalid).to_string().contains("not its start"));
        assert_eq!(sys::cuMemAlloc_v2(&mut raw, 0), invalid);
    }
}

#[test]
fn standin_unimplemented_calls_name_themselves() {
    if !standin() {
        return;
    }
    cuda::context(0).unwrap().bind_to_thread().unwrap();
    let mut ptr = 0;
    // SAFETY: the stand-in's stub ignores its arguments.
    let status = unsafe { sys::cuMemAllocManaged(&mut ptr, 64, 1) };
    assert_eq!(status, CUresult::CUDA_ERROR_NOT_SUPPORTED);
    let text = DriverError(status).to_string();
    assert!(
        text.contains("cuMemAllocManaged") && text.contains(STANDIN_LABEL),
        "{text}"
    );
    let mut name = std::ptr::null();
    // SAFETY: valid out-pointer.
    assert_eq!(
        unsafe { sys::cuGetErrorName(status, &mut name) },
        CUresult::CUDA_SUCCESS
    );
    // SAFETY: the driver returned a NUL-terminated static string.
    assert_eq!(
        unsafe { CStr::from_ptr(name) }.to_str().unwrap(),
        "CUDA_ERROR_NOT_SUPPORTED"
    );
}

/// The `.entry` names in a PTX text.
fn entries(ptx: &str) -> Vec<String> {
    ptx.split(".entry ")
        .skip(1)
        .map(|rest| rest.split('(').next().unwrap().trim().to_string())
        .collect()
}

#[test]
fn standin_every_ptx_entry_resolves_to_a_host_build_on_every_device() {
    if !standin() {
        return;
    }
    let sources: [&CudaSource; 3] = [&RANDOM_SOURCE, &TENSOR_OPS, &ATTENTION_SOURCE];
    for ordinal in 0..cuda::device_count() {
        let context = cuda::context(ordinal).unwrap();
        let (major, minor) = context.compute_capability().unwrap();
        let arch = nvrtc::arch_for(major, minor).unwrap();
        for source in sources {
            let ptx = nvrtc::compile(&(source.text)(), source.file_name, &arch).unwrap();
            let names = entries(&ptx.to_src());
            assert!(!names.is_empty(), "{}: no .entry", source.file_name);
            let module = context.load_module(ptx).unwrap();
            for name in names {
                module.load_function(&name).unwrap_or_else(|e| {
                    panic!("{} on cuda:{ordinal}: {name}: {e}", source.file_name)
                });
            }
            let missing = module.load_function("ditto_no_such_kernel").unwrap_err();
            assert_eq!(missing.0, CUresult::CUDA_ERROR_NOT_FOUND);
        }
    }
}

#[test]
fn standin_devices_differ_where_ditto_must_not_care() {
    if !gpus(2) || !standin() {
        return;
    }
    let attribute = |ordinal: usize, attr| cuda::context(ordinal).unwrap().attribute(attr).unwrap();
    use sys::CUdevice_attribute::{
        CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED as POOLS,
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT as SMS,
    };
    assert_ne!(attribute(0, SMS), attribute(1, SMS), "SM counts");
    assert_eq!(cuda::sm_count(0).unwrap(), attribute(0, SMS) as u32);
    // cudarc allocates with cuMemAllocAsync on one and cuMemAlloc_v2 on the other.
    assert_ne!(attribute(0, POOLS), attribute(1, POOLS), "memory pools");
    for ordinal in 0..2 {
        assert!(cuda::get_device_name(ordinal)
            .unwrap()
            .contains(STANDIN_LABEL));
    }
}

/// What the child process checks: with a driver that lacks `cuMemAllocAsync`,
/// `cuMemcpyHtoDAsync_v2` and `cuLaunchKernel`, allocating on a memory-pool device,
/// uploading and launching are typed errors, never a panic (cudarc panics on a missing
/// symbol).
fn half_installed_checks() {
    use ditto::rng_gen;
    use ditto::tensor_core::{DType, Device, Tensor, TensorError};
    let unavailable = |what: &str, r: Result<Tensor, TensorError>| match r {
        Err(TensorError::Cuda(CudaError::Unavailable { .. })) => {}
        other => panic!("{what}: expected CudaError::Unavailable, got {other:?}"),
    };
    assert!(cuda::is_available());
    // Device 0 has memory pools: cudarc allocates with the missing cuMemAllocAsync.
    unavailable(
        "alloc on cuda:0",
        Tensor::zeros(&[4], DType::F32, Device::Cuda(0)),
    );
    // Device 1 allocates with cuMemAlloc_v2, which is there; the upload is not.
    let zeros = Tensor::zeros(&[4], DType::F32, Device::Cuda(1)).unwrap();
    let host = Tensor::ones(&[4], DType::F32, Device::Cpu).unwrap();
    unavailable("upload to cuda:1", host.to_device(Device::Cuda(1)));
    // Kernels compile and load, but cannot be launched.
    unavailable("add on cuda:1", zeros.add(&zeros));
    match rng_gen::rand(&[4], DType::F32, Device::Cuda(1), None) {
        Err(rng_gen::RngError::Tensor(TensorError::Cuda(CudaError::Unavailable { .. }))) => {}
        other => panic!("rand on cuda:1: expected CudaError::Unavailable, got {other:?}"),
    }
    assert_eq!(zeros.to_vec::<f32>().unwrap(), vec![0.0; 4]);
}

#[test]
fn standin_a_half_installed_driver_is_a_typed_error_not_a_panic() {
    const CHILD: &str = "DITTO_TEST_HALF_INSTALLED_CHILD";
    if std::env::var_os(CHILD).is_some() {
        half_installed_checks();
        return;
    }
    if !gpus(2) || !standin() {
        return;
    }
    // The driver is loaded once per process: run the checks in a child that finds the
    // half-installed build of the stand-in first on its library path.
    let dir = std::env::var("DITTO_CUDA_STANDIN_DIR")
        .expect("DITTO_CUDA_STANDIN_DIR (cuda_standin.sh --print-env)");
    run_test_in_child(
        test_support::exact_name(
            module_path!(),
            "standin_a_half_installed_driver_is_a_typed_error_not_a_panic",
        )
        .as_str(),
        &std::path::Path::new(&dir).join("half-installed"),
        (CHILD, "1"),
    );
}

#[test]
fn standin_modules_are_checked_against_the_host_builds_and_the_driver_version() {
    use ditto::tensor_core::cudarc::nvrtc::Ptx;
    if !standin() {
        return;
    }
    let context = cuda::context(0).unwrap();
    let module = |version: &str, target: &str, entry: &str| {
        let text = format!(
            ".version {version}\n.target {target}\n.address_size 64\n\n\
             .visible .entry {entry}\n{{\n\tret;\n}}\n"
        );
        context
            .load_module(Ptx::from_src(text))
            .map(|_| ())
            .map_err(|e| e.0)
    };
    // ditto_axpy_f32(u64 n, float alpha, const float* x, float* s), as NVRTC declares it.
    let axpy = "ditto_axpy_f32(\n\t.param .u64 a_0,\n\t.param .f32 a_1,\n\t.param .u64 a_2,\n\t.param .u64 a_3\n)";
    assert_eq!(module("9.0", "sm_90", axpy), Ok(()));
    // A parameter list that disagrees with the host build's C++ signature.
    let short = "ditto_axpy_f32(\n\t.param .u64 a_0,\n\t.param .f32 a_1,\n\t.param .u64 a_2\n)";
    let wide = "ditto_axpy_f32(\n\t.param .u64 a_0,\n\t.param .f64 a_1,\n\t.param .u64 a_2,\n\t.param .u64 a_3\n)";
    assert_eq!(
        module("9.0", "sm_90", short),
        Err(CUresult::CUDA_ERROR_INVALID_PTX)
    );
    assert_eq!(
        module("9.0", "sm_90", wide),
        Err(CUresult::CUDA_ERROR_INVALID_PTX)
    );
    assert!(DriverError(CUresult::CUDA_ERROR_INVALID_PTX)
        .to_string()
        .contains("parameter 1"));
    // What a CUDA 13.0 driver on a compute 9.0 device refuses.
    assert_eq!(
        module("9.1", "sm_90", axpy),
        Err(CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
    );
    assert_eq!(
        module("9.0", "sm_100", axpy),
        Err(CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU)
    );
    // Launch bounds in the PTX (__launch_bounds__) limit the block like the driver does.
    let bounded = context
        .load_module(Ptx::from_src(format!(
            ".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry {axpy}\n.maxntid 128, 1, 1\n{{\n\tret;\n}}\n"
        )))
        .unwrap();
    let func = bounded.load_function("ditto_axpy_f32").unwrap();
    let stream = cuda::default_stream(0).unwrap();
    let x = stream.alloc_zeros::<f32>(256).unwrap();
    let mut y = stream.alloc_zeros::<f32>(256).unwrap();
    for (threads, want) in [
        (256, Err(DriverError(CUresult::CUDA_ERROR_INVALID_VALUE))),
        (128, Ok(())),
    ] {
        let (n, alpha) = (256u64, 1f32);
        let mut args = stream.launch_builder(&func);
        args.arg(&n).arg(&alpha).arg(&x).arg(&mut y);
        let cfg = LaunchConfig {
            grid_dim: (2, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: ditto_axpy_f32(u64 n, float alpha, const float* x, float* s) over 256
        // floats each.
        assert_eq!(
            unsafe { args.launch(cfg) }.map(|_| ()),
            want,
            "{threads} threads"
        );
    }
    // An entry without a host build loads (the driver does not know which will run) but
    // cannot be fetched.
    let loaded = context
        .load_module(Ptx::from_src(
            ".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry not_ditto()\n{\n\tret;\n}\n".to_string(),
        ))
        .unwrap();
    let missing = loaded.load_function("not_ditto").unwrap_err();
    assert_eq!(missing.0, CUresult::CUDA_ERROR_NOT_FOUND);
    assert!(
        missing.to_string().contains("has no host build"),
        "{missing}"
    );
}

/// The driver's rule for graphs holding memory (issue 33, item 2): an allocation a
/// capture made with `cuMemAllocAsync` and did not free is still allocated after a
/// launch, and the graph cannot be launched again (`CUDA_ERROR_INVALID_VALUE`) unless it
/// was instantiated with `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH` or frees it
/// itself. cuBLAS 12.2+ makes such an allocation when a gemm is captured with no
/// workspace set, which is why ditto sets one and instantiates with that flag.
#[test]
fn a_graph_holding_an_allocation_relaunches_only_with_auto_free_on_launch() {
    if !gpu() {
        return;
    }
    use ditto::tensor_core::cudarc::driver::result;
    use sys::{CUgraphInstantiate_flags as Flags, CUstreamCaptureMode};
    let context = cuda::context(0).unwrap();
    context.bind_to_thread().unwrap();
    // A stream of its own: other tests' work on ditto's stream must not land in the graph.
    let stream = context.new_stream().unwrap();
    let graph = |free_in_graph: bool, flags: Flags| {
        let mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        stream.begin_capture(mode).unwrap();
        // SAFETY: a stream-ordered allocation of 256 bytes on a live stream, freed (if at
        // all) on the same stream; nothing reads or writes it.
        unsafe {
            let ptr = result::malloc_async(stream.cu_stream(), 256).unwrap();
            if free_in_graph {
                result::free_async(ptr, stream.cu_stream()).unwrap();
            }
        }
        stream.end_capture(flags).unwrap().unwrap()
    };
    let plain = Flags(0);
    let auto_free = Flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
    let holding = graph(false, plain);
    holding.launch().unwrap();
    assert_eq!(
        holding.launch().unwrap_err(),
        DriverError(CUresult::CUDA_ERROR_INVALID_VALUE),
        "a relaunch while the last launch's allocation is unfreed"
    );
    for (what, g) in [
        ("auto-free-on-launch", graph(false, auto_free)),
        ("freed in the graph", graph(true, plain)),
    ] {
        for launch in 0..3 {
            g.launch()
                .unwrap_or_else(|e| panic!("{what}: launch {launch}: {e}"));
        }
    }
    stream.synchronize().unwrap();
}
