//! What one cuBLAS gemm call multiplies and writes, so `GemmOperands::run` (`cuda.rs`)
//! plans the layout once for every kind of product:
//!
//! - [`Same<T>`]: f32 or f64 operands and output (`cublasSgemm` / `cublasDgemm` and
//!   their strided-batched forms, through cudarc's `Gemm`);
//! - [`Bf16IntoF32`]: bf16 operands, f32 output and f32 sums (`cublasGemmEx` /
//!   `cublasGemmStridedBatchedEx` with `CUBLAS_COMPUTE_32F`): bf16 autocast's GEMM
//!   (`autocast.rs`). A product of two bf16 values is exact in f32, so this computes
//!   what the rounded-operand f32 product computes, in cuBLAS's order of additions,
//!   reading half the bytes and, on GPUs that have them, on bf16 tensor cores (its own
//!   handle in cuBLAS's default math: pedantic math keeps them off).

use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::cublas::result::CublasError;
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cudaDataType_t};
use cudarc::cublas::{result, CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr};

use crate::ops::Float;

/// The element types of one gemm call and the call itself.
pub(crate) trait GemmElements {
    /// What A and B hold.
    type In: DeviceRepr;
    /// What C holds, and the type of alpha and beta.
    type Out: Float + DeviceRepr;

    /// The cuBLAS handle these products run on: the pedantic one (no TF32), unless
    /// the type says otherwise.
    fn handle(ordinal: usize) -> cuda_runtime::Result<Arc<CudaBlas>> {
        cuda_runtime::cublas::handle(ordinal)
    }

    /// `C = alpha op(A) op(B) + beta C`, on `stream` (the handle's).
    ///
    /// # Safety
    /// `cfg` must describe matrices that lie inside `a`, `b` and `c`.
    unsafe fn gemm(
        blas: &CudaBlas,
        stream: &CudaStream,
        cfg: GemmConfig<Self::Out>,
        a: &CudaView<'_, Self::In>,
        b: &CudaView<'_, Self::In>,
        c: &mut CudaViewMut<'_, Self::Out>,
    ) -> Result<(), CublasError>;

    /// `cfg.batch_size` gemms, entry i at `i * stride` of each operand.
    ///
    /// # Safety
    /// As [`gemm`](Self::gemm), for every entry.
    unsafe fn gemm_strided_batched(
        blas: &CudaBlas,
        stream: &CudaStream,
        cfg: StridedBatchedConfig<Self::Out>,
        a: &CudaView<'_, Self::In>,
        b: &CudaView<'_, Self::In>,
        c: &mut CudaViewMut<'_, Self::Out>,
    ) -> Result<(), CublasError>;
}

/// Operands and output of one float type `T` (f32 or f64).
pub(crate) struct Same<T>(PhantomData<T>);

impl<T: Float + DeviceRepr> GemmElements for Same<T>
where
    CudaBlas: Gemm<T>,
{
    type In = T;
    type Out = T;

    unsafe fn gemm(
        blas: &CudaBlas,
        _stream: &CudaStream,
        cfg: GemmConfig<T>,
        a: &CudaView<'_, T>,
        b: &CudaView<'_, T>,
        c: &mut CudaViewMut<'_, T>,
    ) -> Result<(), CublasError> {
        // SAFETY: the caller's promise, passed on.
        unsafe { blas.gemm(cfg, a, b, c) }
    }

    unsafe fn gemm_strided_batched(
        blas: &CudaBlas,
        _stream: &CudaStream,
        cfg: StridedBatchedConfig<T>,
        a: &CudaView<'_, T>,
        b: &CudaView<'_, T>,
        c: &mut CudaViewMut<'_, T>,
    ) -> Result<(), CublasError> {
        // SAFETY: the caller's promise, passed on.
        unsafe { blas.gemm_strided_batched(cfg, a, b, c) }
    }
}

/// bf16 operands (their bits, as `u16`), f32 output, f32 compute.
pub(crate) struct Bf16IntoF32;

const BF16: cudaDataType_t = cudaDataType_t::CUDA_R_16BF;
const F32: cudaDataType_t = cudaDataType_t::CUDA_R_32F;
const COMPUTE: cublasComputeType_t = cublasComputeType_t::CUBLAS_COMPUTE_32F;
const ALGO: cublasGemmAlgo_t = cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;

impl GemmElements for Bf16IntoF32 {
    type In = u16;
    type Out = f32;

    /// cuBLAS's default math, so the products may run on bf16 tensor cores (see
    /// `cuda_runtime::cublas`).
    fn handle(ordinal: usize) -> cuda_runtime::Result<Arc<CudaBlas>> {
        cuda_runtime::cublas::tensor_op_handle(ordinal)
    }

    unsafe fn gemm(
        blas: &CudaBlas,
        stream: &CudaStream,
        cfg: GemmConfig<f32>,
        a: &CudaView<'_, u16>,
        b: &CudaView<'_, u16>,
        c: &mut CudaViewMut<'_, f32>,
    ) -> Result<(), CublasError> {
        let (a, _read_a) = a.device_ptr(stream);
        let (b, _read_b) = b.device_ptr(stream);
        let (c, _write_c) = c.device_ptr_mut(stream);
        let (alpha, beta) = (cfg.alpha, cfg.beta);
        // SAFETY: the caller's promise for the matrices; alpha and beta are host f32s
        // (the handle's host pointer mode) that outlive the call.
        unsafe {
            result::gemm_ex(
                *blas.handle(),
                cfg.transa,
                cfg.transb,
                cfg.m,
                cfg.n,
                cfg.k,
                (&raw const alpha).cast(),
                a as *const _,
                BF16,
                cfg.lda,
                b as *const _,
                BF16,
                cfg.ldb,
                (&raw const beta).cast(),
                c as *mut _,
                F32,
                cfg.ldc,
                COMPUTE,
                ALGO,
            )
        }
    }

    unsafe fn gemm_strided_batched(
        blas: &CudaBlas,
        stream: &CudaStream,
        cfg: StridedBatchedConfig<f32>,
        a: &CudaView<'_, u16>,
        b: &CudaView<'_, u16>,
        c: &mut CudaViewMut<'_, f32>,
    ) -> Result<(), CublasError> {
        let (a, _read_a) = a.device_ptr(stream);
        let (b, _read_b) = b.device_ptr(stream);
        let (c, _write_c) = c.device_ptr_mut(stream);
        let g = cfg.gemm;
        let (alpha, beta) = (g.alpha, g.beta);
        // SAFETY: as for one gemm, for every entry.
        unsafe {
            result::gemm_strided_batched_ex(
                *blas.handle(),
                g.transa,
                g.transb,
                g.m,
                g.n,
                g.k,
                (&raw const alpha).cast(),
                a as *const _,
                BF16,
                g.lda,
                cfg.stride_a,
                b as *const _,
                BF16,
                g.ldb,
                cfg.stride_b,
                (&raw const beta).cast(),
                c as *mut _,
                F32,
                g.ldc,
                cfg.stride_c,
                cfg.batch_size,
                COMPUTE,
                ALGO,
            )
        }
    }
}
