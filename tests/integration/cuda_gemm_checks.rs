//! cuBLAS's gemms as ditto calls them, checked through cudarc's raw calls: the plain
//! gemm's column-major semantics and leading-dimension checks, and the strided batch
//! (batched `matmul`'s call) being its entries' gemms, with its own argument checks.
//! They hold on a real GPU and on the CUDA stand-in (host-executed) alike; what only the
//! stand-in promises (a batch bit-equal to its entries' plain gemms, overlapping
//! outputs refused) is checked only there. Operands outside their buffers poison the
//! device, so those are in `cuda_standin_faults.rs`.

use crate::support;

use ditto::tensor_core::cuda;
use ditto::tensor_core::cudarc::cublas::sys::{cublasOperation_t, cublasStatus_t};
use ditto::tensor_core::cudarc::cublas::{
    result::CublasError, CudaBlas, Gemm, GemmConfig, StridedBatchedConfig,
};
use support::{gpu, on_standin};

/// C = op(A) op(B) by cuBLAS's column-major definition, on the host, in f64.
#[allow(clippy::too_many_arguments)]
fn reference_gemm(cfg: &GemmConfig<f32>, a: &[f32], b: &[f32], c: &mut [f32]) {
    let (m, n, k) = (cfg.m as usize, cfg.n as usize, cfg.k as usize);
    let (lda, ldb, ldc) = (cfg.lda as usize, cfg.ldb as usize, cfg.ldc as usize);
    let ta = cfg.transa != cublasOperation_t::CUBLAS_OP_N;
    let tb = cfg.transb != cublasOperation_t::CUBLAS_OP_N;
    for j in 0..n {
        for i in 0..m {
            let sum: f64 = (0..k)
                .map(|p| {
                    let x = if ta { a[p + i * lda] } else { a[i + p * lda] };
                    let y = if tb { b[j + p * ldb] } else { b[p + j * ldb] };
                    f64::from(x) * f64::from(y)
                })
                .sum();
            c[i + j * ldc] = sum as f32;
        }
    }
}

#[test]
fn gemm_is_column_major_and_checks_its_leading_dimensions() {
    if !gpu() {
        return;
    }
    let stream = cuda::default_stream(0).unwrap();
    let blas = CudaBlas::new(stream.clone()).unwrap();
    let values = |n: usize, salt: f32| {
        (0..n)
            .map(|i| ((i as f32) * 0.37 + salt).sin())
            .collect::<Vec<_>>()
    };
    let (a_host, b_host) = (values(64, 0.1), values(64, 0.7));
    let a = stream.clone_htod(&a_host).unwrap();
    let b = stream.clone_htod(&b_host).unwrap();
    let mut c = stream.alloc_zeros::<f32>(64).unwrap();
    let (n_op, t_op) = (
        cublasOperation_t::CUBLAS_OP_N,
        cublasOperation_t::CUBLAS_OP_T,
    );
    let config = |transa, transb, lda, ldb, ldc| GemmConfig {
        transa,
        transb,
        m: 3,
        n: 4,
        k: 5,
        alpha: 1.0f32,
        lda,
        ldb,
        beta: 0.0,
        ldc,
    };
    // Good calls, with leading dimensions larger than the rows and both transposes.
    for cfg in [
        config(n_op, n_op, 3, 5, 3),
        config(t_op, n_op, 5, 6, 4),
        config(n_op, t_op, 7, 4, 3),
        config(t_op, t_op, 6, 5, 5),
    ] {
        // SAFETY: every operand's extent, (cols - 1) * ld + rows, is at most 64 floats.
        unsafe { blas.gemm(cfg, &a, &b, &mut c) }.unwrap();
        let got = stream.clone_dtoh(&c).unwrap();
        let mut want = got.clone();
        reference_gemm(&cfg, &a_host, &b_host, &mut want);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-5, "{cfg:?}: element {i}: {g} vs {w}");
        }
    }
    // Leading dimensions below max(1, rows as stored) are CUBLAS_STATUS_INVALID_VALUE.
    let invalid = CublasError(cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE);
    for cfg in [
        config(n_op, n_op, 2, 5, 3), // lda < m
        config(t_op, n_op, 4, 5, 3), // lda < k (A transposed)
        config(n_op, n_op, 3, 4, 3), // ldb < k
        config(n_op, t_op, 3, 3, 3), // ldb < n (B transposed)
        config(n_op, n_op, 3, 5, 2), // ldc < m
    ] {
        // SAFETY: refused before any memory is read.
        let result = unsafe { blas.gemm(cfg, &a, &b, &mut c) };
        assert_eq!(result, Err(invalid), "{cfg:?}");
    }
}

#[test]
fn strided_batched_gemm_is_its_entries_gemms_and_checks_its_arguments() {
    if !gpu() {
        return;
    }
    let stream = cuda::default_stream(0).unwrap();
    let blas = CudaBlas::new(stream.clone()).unwrap();
    let values = |n: usize, salt: f32| {
        (0..n)
            .map(|i| ((i as f32) * 0.61 + salt).cos())
            .collect::<Vec<_>>()
    };
    let (a_host, b_host) = (values(64, 0.3), values(64, 0.9));
    let a = stream.clone_htod(&a_host).unwrap();
    let b = stream.clone_htod(&b_host).unwrap();
    let (n_op, t_op) = (
        cublasOperation_t::CUBLAS_OP_N,
        cublasOperation_t::CUBLAS_OP_T,
    );
    // 3 entries of C (3 x 4) = op(A) op(B), k = 5; B's stride 0 reuses one B (broadcast).
    let batched = |transa, lda, stride_a, stride_b, stride_c, batch_size| StridedBatchedConfig {
        gemm: GemmConfig {
            transa,
            transb: n_op,
            m: 3,
            n: 4,
            k: 5,
            alpha: 1.0f32,
            lda,
            ldb: 5,
            beta: 0.0,
            ldc: 3,
        },
        batch_size,
        stride_a,
        stride_b,
        stride_c,
    };
    for cfg in [
        batched(n_op, 3, 15, 20, 12, 3),
        batched(t_op, 6, 18, 0, 14, 3),
    ] {
        let mut c = stream.alloc_zeros::<f32>(64).unwrap();
        // SAFETY: the last entry ends at 2 * 18 + (3 - 1) * 6 + 5 = 53 (A), 2 * 20 + 20
        // = 60 (B) and 2 * 14 + 12 = 40 (C) floats, all within the 64 allocated.
        unsafe { blas.gemm_strided_batched(cfg, &a, &b, &mut c) }.unwrap();
        let got = stream.clone_dtoh(&c).unwrap();
        for i in 0..3 {
            let [sa, sb, sc] = [cfg.stride_a, cfg.stride_b, cfg.stride_c].map(|s| s as usize * i);
            let mut want = vec![0.0f32; 12];
            reference_gemm(&cfg.gemm, &a_host[sa..], &b_host[sb..], &mut want);
            for (j, (g, w)) in got[sc..sc + 12].iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5,
                    "{cfg:?}: entry {i} element {j}: {g} vs {w}"
                );
            }
            let mut single = stream.alloc_zeros::<f32>(12).unwrap();
            let (ea, eb) = (a.slice(sa..), b.slice(sb..));
            // SAFETY: the entry's operands, as above, from their own offsets.
            unsafe { blas.gemm(cfg.gemm, &ea, &eb, &mut single) }.unwrap();
            if on_standin() {
                let single = stream.clone_dtoh(&single).unwrap();
                let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got[sc..sc + 12]), bits(&single), "{cfg:?}: entry {i}");
            }
        }
    }
    // A batch of none writes nothing; bad sizes, a negative batch count and a leading
    // dimension below the rows are CUBLAS_STATUS_INVALID_VALUE, before memory is read.
    let mut c = stream.clone_htod(&[7.0f32; 64]).unwrap();
    // SAFETY: no entry is computed.
    unsafe { blas.gemm_strided_batched(batched(n_op, 3, 15, 20, 12, 0), &a, &b, &mut c) }.unwrap();
    assert_eq!(stream.clone_dtoh(&c).unwrap(), vec![7.0; 64]);
    let invalid = Err(CublasError(cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE));
    let mut negative_m = batched(n_op, 3, 15, 20, 12, 3);
    negative_m.gemm.m = -1;
    let mut refused = vec![
        negative_m,
        batched(n_op, 3, 15, 20, 12, -1),
        batched(n_op, 2, 15, 20, 12, 3), // lda < m
    ];
    if on_standin() {
        // C entries 6 floats apart overlap (each is 12): a race on a GPU, which cuBLAS
        // leaves undefined and the stand-in refuses.
        refused.push(batched(n_op, 3, 15, 20, 6, 3));
    }
    for cfg in refused {
        // SAFETY: refused before any memory is touched.
        let result = unsafe { blas.gemm_strided_batched(cfg, &a, &b, &mut c) };
        assert_eq!(result, invalid, "{cfg:?}");
    }
}

/// bf16 autocast on CUDA in default arithmetic: the operands narrowed on the device
/// (`to_dtype(BF16)`, the CPU's rounding bit for bit) and multiplied by cuBLAS's bf16
/// GEMM into f32 (`cublasGemmEx` / `cublasGemmStridedBatchedEx`), 2-D with a transposed
/// operand and batched over strided heads as attention's. Each result is the product of
/// the rounded operands: within f32 rounding of the CPU's, and on the stand-in (whose Ex
/// gemm widens bf16 exactly and sums as its sgemm does) bit-equal to the f32 cuBLAS
/// product of the rounded operands, which fails if an operand's layout is misread.
#[test]
fn bf16_autocast_products_are_bf16_gemms_into_f32() {
    use ditto::tensor_core::{autocast, DType, Device, Tensor};
    use support::{bits_of, cpu_tensor};
    if !gpu() {
        return;
    }
    let cuda = Device::Cuda(0);
    let on = |t: &Tensor| t.to_device(cuda).unwrap();
    let x = cpu_tensor(&[7, 9], 3).t().unwrap();
    assert_eq!(
        bits_of(&on(&x).to_dtype(DType::BF16).unwrap()),
        bits_of(&x.to_dtype(DType::BF16).unwrap()),
        "to_dtype(BF16) on the device"
    );
    let cases = [
        (
            cpu_tensor(&[37, 70], 1),
            cpu_tensor(&[50, 70], 2).t().unwrap(),
        ),
        (
            cpu_tensor(&[2, 9, 3, 8], 3).transpose(1, 2).unwrap(),
            cpu_tensor(&[2, 3, 6, 8], 4).transpose(2, 3).unwrap(),
        ),
    ];
    let distance = |a: &Tensor, b: &Tensor| {
        let (a, b) = (
            a.to_device(Device::Cpu).unwrap(),
            b.to_device(Device::Cpu).unwrap(),
        );
        let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        let scale = b.iter().fold(f32::MIN_POSITIVE, |m, x| m.max(x.abs()));
        a.iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs() / scale)
            .fold(0.0, f32::max)
    };
    for (lhs, rhs) in &cases {
        let round = |t: &Tensor| t.round_to_bf16().unwrap();
        let want = round(lhs).matmul(&round(rhs)).unwrap();
        let f32_product = on(&round(lhs)).matmul(&on(&round(rhs))).unwrap();
        let got = {
            let _bf16 = autocast(DType::BF16).unwrap();
            on(lhs).matmul(&on(rhs)).unwrap()
        };
        assert_eq!((got.dtype(), got.dims()), (DType::F32, want.dims()));
        let d = distance(&got, &want);
        assert!(d < 1e-5, "{:?}: {d:e} from the CPU's", want.dims());
        let unrounded = lhs.matmul(rhs).unwrap();
        assert!(
            distance(&got, &unrounded) > 1e-4,
            "the operands were rounded"
        );
        if on_standin() {
            assert_eq!(bits_of(&got), bits_of(&f32_product), "{:?}", want.dims());
        }
    }
}
