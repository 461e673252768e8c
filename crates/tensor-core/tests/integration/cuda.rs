//! CUDA storage tests. Without a GPU the typed-error tests run and the GPU tests print
//! why they skipped; with `REQUIRE_GPU=1` a skip is a failure.

use tensor_core::{bf16, cuda, f16, CudaError, DType, Device, Element, Tensor, TensorError};

/// True when a GPU is usable; otherwise prints the reason (or fails under REQUIRE_GPU=1).
fn gpu_or_skip() -> bool {
    if cuda::is_available() {
        return true;
    }
    let reason = match Tensor::zeros(&[1], DType::F32, Device::Cuda(0)) {
        Err(e) => e.to_string(),
        Ok(_) => "no CUDA device".to_string(),
    };
    assert!(
        std::env::var("REQUIRE_GPU").as_deref() != Ok("1"),
        "REQUIRE_GPU=1 but no GPU is usable: {reason}"
    );
    eprintln!("skipping: {reason}");
    false
}

/// Whether `r` failed with "no GPU": the runtime's calls (`cuda::synchronize`, ...)
/// answer with its `CudaError`, tensor calls with the `TensorError` it becomes.
fn is_unavailable<T: std::fmt::Debug, E: Into<TensorError>>(r: Result<T, E>) -> bool {
    matches!(
        r.map_err(Into::into),
        Err(TensorError::Cuda(CudaError::Unavailable { .. }))
    )
}

#[test]
fn without_a_gpu_every_request_is_a_typed_error() {
    if cuda::is_available() {
        eprintln!("skipping: a GPU is present");
        return;
    }
    assert_eq!(cuda::device_count(), 0);
    assert!(!cuda::is_available());
    let cpu = Tensor::ones(&[2], DType::F32, Device::Cpu).unwrap();
    assert!(is_unavailable(Tensor::zeros(
        &[2],
        DType::F32,
        Device::Cuda(0)
    )));
    assert!(is_unavailable(cpu.to_device(Device::Cuda(0))));
    assert!(is_unavailable(Tensor::from_vec(
        vec![1u8],
        &[1],
        Device::Cuda(1)
    )));
    assert!(is_unavailable(cuda::synchronize(0)));
    #[cfg(feature = "cuda")]
    {
        assert!(is_unavailable(cuda::context(0)));
        assert!(is_unavailable(cuda::default_stream(3)));
        assert!(is_unavailable(cuda::CudaStorage::alloc(0, DType::U8, 4)));
    }
    let err = cpu.to_device(Device::Cuda(0)).unwrap_err().to_string();
    #[cfg(feature = "cuda")]
    assert!(
        err.contains("no CUDA driver found") || err.contains("devices present"),
        "{err}"
    );
    #[cfg(not(feature = "cuda"))]
    assert!(err.contains("without the `cuda` feature"), "{err}");
}

/// Uploads `values`, downloads them, and checks they come back unchanged.
fn round_trip<T: Element>(values: Vec<T>) {
    let n = values.len();
    let cpu = Tensor::from_vec(values.clone(), &[n], Device::Cpu).unwrap();
    let gpu = cpu.to_device(Device::Cuda(0)).unwrap();
    assert_eq!(gpu.device(), Device::Cuda(0));
    assert_eq!(gpu.dtype(), T::DTYPE);
    assert_eq!(
        gpu.to_device(Device::Cpu).unwrap().to_vec::<T>().unwrap(),
        values
    );
    assert_eq!(gpu.to_vec::<T>().unwrap(), values);
}

#[test]
fn gpu_round_trips_every_dtype() {
    if !gpu_or_skip() {
        return;
    }
    round_trip(vec![1.5f32, -0.0, f32::INFINITY, f32::MIN_POSITIVE]);
    round_trip(vec![1.5f64, -2.25, f64::MAX]);
    round_trip(vec![f16::from_f32(0.1), f16::MAX, f16::NEG_INFINITY]);
    round_trip(vec![bf16::from_f32(0.1), bf16::MIN, bf16::ONE]);
    round_trip(vec![i64::MIN, -1, 0, i64::MAX]);
    round_trip(vec![0u32, 0xDEAD_BEEF, u32::MAX]);
    round_trip(vec![0u8, 7, 255]);
    round_trip(vec![true, false, false, true, true]);
    round_trip(Vec::<f32>::new());
}

#[test]
fn gpu_views_zeros_and_gathers() {
    if !gpu_or_skip() {
        return;
    }
    let cuda = Device::Cuda(0);
    let z = Tensor::zeros(&[3, 2], DType::Bool, cuda).unwrap();
    assert_eq!(z.to_vec::<bool>().unwrap(), vec![false; 6]);
    let m = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu)
        .unwrap()
        .reshape(&[2, 3])
        .unwrap();
    let g = m.to_device(cuda).unwrap();
    let t = g.t().unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![0., 3., 1., 4., 2., 5.]);
    let c = t.contiguous().unwrap();
    assert_eq!(c.device(), cuda);
    assert!(c.is_contiguous());
    assert_eq!(c.to_vec::<f32>().unwrap(), vec![0., 3., 1., 4., 2., 5.]);
    let row = g.narrow(0, 1, 1).unwrap();
    assert_eq!(row.to_vec::<f32>().unwrap(), vec![3., 4., 5.]);
    let back = row.to_device(Device::Cpu).unwrap();
    assert_eq!(back.storage_offset(), 0);
    assert_eq!(back.cpu_storage().unwrap().len(), 3);
    let sel = g.index_select(0, &[1, 0]).unwrap();
    assert_eq!(sel.device(), cuda);
    assert_eq!(sel.to_vec::<f32>().unwrap(), vec![3., 4., 5., 0., 1., 2.]);
    let cat = Tensor::cat(&[g.clone(), g.clone()], 0).unwrap();
    assert_eq!(cat.dims(), &[4, 3]);
    assert_eq!(cat.device(), cuda);
    assert_eq!(
        cat.to_vec::<f32>().unwrap(),
        vec![0., 1., 2., 3., 4., 5., 0., 1., 2., 3., 4., 5.]
    );
    // Device-side cat (one copy per input): a view with an offset, a transposed input,
    // and an empty one; along dim 1 (outer size 2) it goes through the host, same values.
    let flat = Tensor::cat(
        &[
            row.reshape(&[3]).unwrap(),
            t.reshape(&[6]).unwrap(),
            g.narrow(0, 0, 0).unwrap().reshape(&[0]).unwrap(),
        ],
        0,
    )
    .unwrap();
    assert_eq!(flat.device(), cuda);
    assert_eq!(
        flat.to_vec::<f32>().unwrap(),
        vec![3., 4., 5., 0., 3., 1., 4., 2., 5.]
    );
    let wide = Tensor::cat(&[g.clone(), g], 1).unwrap();
    assert_eq!(
        wide.to_vec::<f32>().unwrap(),
        vec![0., 1., 2., 0., 1., 2., 3., 4., 5., 3., 4., 5.]
    );
    cuda::synchronize(0).unwrap();
}

#[test]
fn gpu_bad_ordinal_is_a_typed_error() {
    if !gpu_or_skip() {
        return;
    }
    let n = cuda::device_count();
    let err = Tensor::zeros(&[1], DType::F32, Device::Cuda(n)).unwrap_err();
    match err {
        TensorError::Cuda(CudaError::Unavailable { ordinal, reason }) => {
            assert_eq!(ordinal, n);
            assert!(reason.contains("devices present"), "{reason}");
        }
        other => panic!("expected CudaError::Unavailable, got {other:?}"),
    }
    if n >= 2 {
        let a = Tensor::from_vec(vec![1i64, 2, 3], &[3], Device::Cuda(0)).unwrap();
        let b = a.to_device(Device::Cuda(1)).unwrap();
        assert_eq!(b.device(), Device::Cuda(1));
        assert_eq!(b.to_vec::<i64>().unwrap(), vec![1, 2, 3]);
    }
}

#[test]
fn gpu_ops_reject_mixed_devices_and_host_access() {
    if !gpu_or_skip() {
        return;
    }
    let cpu = Tensor::ones(&[2, 2], DType::F32, Device::Cpu).unwrap();
    let gpu = cpu.to_device(Device::Cuda(0)).unwrap();
    assert!(matches!(
        gpu.add(&cpu),
        Err(TensorError::DeviceMismatch { .. })
    ));
    assert!(matches!(
        gpu.matmul(&cpu),
        Err(TensorError::DeviceMismatch { .. })
    ));
    assert!(matches!(
        gpu.as_slice::<f32>(),
        Err(TensorError::WrongDevice { .. })
    ));
}

#[cfg(feature = "cuda")]
#[test]
fn gpu_storage_api() {
    use tensor_core::cuda::CudaStorage;
    use tensor_core::CpuStorage;
    if !gpu_or_skip() {
        return;
    }
    let empty = CudaStorage::alloc(0, DType::U8, 0).unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty.to_cpu().unwrap(), CpuStorage::U8(vec![]));
    let zeros = CudaStorage::alloc(0, DType::F64, 3).unwrap();
    // The block is the size class (exact on the CUDA stand-in, rounded up on a GPU).
    assert!(zeros.bytes().len() >= 24);
    assert_eq!(zeros.to_cpu().unwrap(), CpuStorage::F64(vec![0.0; 3]));
    let s = CudaStorage::from_cpu(&CpuStorage::U32(vec![1, 2, 3]), 0).unwrap();
    assert_eq!((s.dtype(), s.len(), s.ordinal()), (DType::U32, 3, 0));
    let mut c = s.try_clone().unwrap();
    let stream = c.stream().unwrap();
    stream
        .memcpy_htod(&[9u8, 0, 0, 0][..], c.bytes_mut())
        .unwrap();
    assert_eq!(c.to_cpu().unwrap(), CpuStorage::U32(vec![9, 2, 3]));
    assert_eq!(s.to_cpu().unwrap(), CpuStorage::U32(vec![1, 2, 3]));
    assert_eq!(s.to_cpu_range(1, 2).unwrap(), CpuStorage::U32(vec![2, 3]));
    assert!(s.to_cpu_range(2, 2).is_err());
    assert!(cuda::context(0).is_ok());
    assert!(cuda::default_stream(0).is_ok());
    cuda::synchronize(0).unwrap();
}

/// A tensor is `Send`: dropping it on a thread that never used CUDA must give its memory
/// back (to the caching allocator, which `empty_cache` returns to the device) and leave
/// the device usable. (Found by the CUDA stand-in: cudarc frees with
/// `cuMemFreeAsync` on the calling thread's current context; with none current the free
/// failed with CUDA_ERROR_INVALID_CONTEXT, the buffer leaked, and the error resurfaced
/// on the next unrelated call on that device.)
#[cfg(feature = "cuda")]
#[test]
fn gpu_tensors_dropped_on_another_thread_are_freed() {
    if !gpu_or_skip() {
        return;
    }
    // 64 MiB, so a leak shows however much other tests allocate meanwhile (they run in
    // parallel threads; the slack below covers them).
    const ELEMENTS: usize = 1 << 24;
    const SLACK: usize = 16 << 20;
    for ordinal in 0..cuda::device_count().min(2) {
        let device = Device::Cuda(ordinal);
        let context = cuda::context(ordinal).unwrap();
        let free = || {
            // A pool releases freed memory to the device at a synchronisation.
            context.synchronize().unwrap();
            context.mem_get_info().unwrap().0
        };
        let free_before = free();
        let t = Tensor::zeros(&[ELEMENTS], DType::F32, device).unwrap();
        std::thread::spawn(move || drop(t)).join().unwrap();
        let u = Tensor::ones(&[4], DType::F32, device).unwrap();
        assert_eq!(u.add(&u).unwrap().to_vec::<f32>().unwrap(), vec![2.0; 4]);
        drop(u);
        // The dead buffer went to the caching allocator; giving the cache back must
        // return its memory to the device.
        cuda::empty_cache(ordinal).unwrap();
        let free_after = free();
        assert!(
            free_after + SLACK >= free_before,
            "cuda:{ordinal}: {} bytes not freed",
            free_before - free_after
        );
    }
}

/// The caching allocator: a dead buffer's block serves the next request of its size
/// class without the driver, the statistics follow, and `empty_cache` gives the cached
/// blocks back (issue 18). Other tests of this module allocate concurrently, so only
/// what this test alone decides is checked exactly.
#[cfg(feature = "cuda")]
#[test]
fn dead_buffers_are_cached_reused_and_released_on_request() {
    use cudarc::driver::DevicePtr;
    use tensor_core::cuda::{empty_cache, memory_stats, CudaStorage};
    use tensor_core::CpuStorage;
    if !gpu_or_skip() {
        return;
    }
    let address = |s: &CudaStorage| {
        let stream = s.stream().unwrap();
        let (ptr, _record) = s.bytes().device_ptr(&stream);
        ptr
    };
    // An odd size nothing else asks for: its class is this test's alone.
    let elements = 1237;
    let first = CudaStorage::alloc_uninit(0, DType::F32, elements).unwrap();
    let first_at = address(&first);
    let before = memory_stats(0);
    assert!(before.allocated_bytes >= first.bytes().len() as u64);
    assert!(before.peak_allocated_bytes >= before.allocated_bytes);
    drop(first);
    let again = CudaStorage::alloc(0, DType::F32, elements).unwrap();
    assert_eq!(address(&again), first_at, "the dead block was not reused");
    assert!(memory_stats(0).cache_hits > before.cache_hits);
    // `alloc` zero-fills even a reused block.
    assert_eq!(
        again.to_cpu().unwrap(),
        CpuStorage::F32(vec![0.0; elements])
    );
    drop(again);
    assert!(memory_stats(0).cached_bytes > 0);
    empty_cache(0).unwrap();
    let emptied = memory_stats(0);
    assert!(emptied.driver_frees > before.driver_frees);
    let fresh = CudaStorage::alloc_uninit(0, DType::F32, elements).unwrap();
    assert!(memory_stats(0).driver_allocations > emptied.driver_allocations);
    drop(fresh);
}

/// Uploads go through a small ring of pinned staging buffers whose copies run later on a
/// GPU (or in the stand-in's deferred mode): a buffer rewritten before its copy ran
/// would hand an earlier tensor a later one's bytes. Many uploads in a row, without a
/// read between them, of sizes that grow buffers and one too large to stage, must each
/// keep its own values; the source vectors are overwritten right after each upload.
#[test]
fn back_to_back_uploads_each_keep_their_own_bytes() {
    if !gpu_or_skip() {
        return;
    }
    let gpu = Device::Cuda(0);
    // A burst of small uploads (each fits a staging buffer as it is: several times round
    // the ring within microseconds, before the deferred stand-in's timer runs the
    // copies), then sizes that grow the buffers; 8 MiB is the largest upload staged, so
    // 8 Mi + 1 f32s (32 MiB) take the pageable path.
    let burst = (1..=64).map(|i| 1 + 37 * i);
    let growing = [1usize, 3, 1000, 20_000, 70_000, 5, 8 * 1024 * 1024 + 1, 17];
    let sizes: Vec<usize> = burst
        .chain(growing.iter().cycle().take(3 * growing.len()).copied())
        .collect();
    let mut source = Vec::new();
    let mut uploaded = Vec::new();
    for (round, &n) in sizes.iter().enumerate() {
        source.clear();
        source.extend((0..n).map(|i| (round * 1_000_003 + i) as f32));
        uploaded.push((round, n, Tensor::from_slice(&source, &[n], gpu).unwrap()));
        // What a data loader does next: refill its buffer with the next batch.
        source.iter_mut().for_each(|v| *v = -1.0);
    }
    for (round, n, tensor) in uploaded {
        let back: Vec<f32> = tensor.to_vec().unwrap();
        let want: Vec<f32> = (0..n).map(|i| (round * 1_000_003 + i) as f32).collect();
        assert!(back == want, "upload {round} ({n} elements) changed");
    }
}

/// The two cuBLAS handles of a device have their math modes: pedantic for f32 and f64
/// products (no TF32), default for bf16 autocast's (tensor cores), and are distinct.
/// (Which products take which handle is `GemmElements::handle`.)
#[cfg(feature = "cuda")]
#[test]
fn the_cublas_handles_have_their_math_modes() {
    use cudarc::cublas::sys::{cublasGetMathMode, cublasMath_t};
    if !gpu_or_skip() {
        return;
    }
    let mode = |blas: &cudarc::cublas::CudaBlas| {
        let mut mode = cublasMath_t::CUBLAS_DEFAULT_MATH;
        // SAFETY: a live handle, and `mode` is a valid place for the answer.
        unsafe { cublasGetMathMode(*blas.handle(), &mut mode) }
            .result()
            .unwrap();
        mode
    };
    let pedantic = cuda_runtime::cublas::handle(0).unwrap();
    let tensor_ops = cuda_runtime::cublas::tensor_op_handle(0).unwrap();
    assert_eq!(mode(&pedantic), cublasMath_t::CUBLAS_PEDANTIC_MATH);
    assert_eq!(mode(&tensor_ops), cublasMath_t::CUBLAS_DEFAULT_MATH);
    assert!(!std::sync::Arc::ptr_eq(&pedantic, &tensor_ops));
    // Each is made once per device.
    assert!(std::sync::Arc::ptr_eq(
        &tensor_ops,
        &cuda_runtime::cublas::tensor_op_handle(0).unwrap()
    ));
}
