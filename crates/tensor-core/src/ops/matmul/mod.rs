//! 2-D matrix multiply on the CPU via the `gemm` crate.
//!
//! # Determinism
//! The output is cut into blocks whose shape depends only on `(m, n, k)`, and each block
//! is one gemm call with `Parallelism::None` over the whole of `k` (`ops/matmul/gemm_blocks.rs`);
//! rayon only decides which thread computes a block. gemm's own threading is not used:
//! in gemm 0.19 the depth blocking `kc` comes from `(m, n, k)` and the cache sizes, not
//! from the thread count, and a probe (f32; shapes 64x784x128, 256x1024x256,
//! 1x4096x512, 512x4096x1, 1000x300x700; `Parallelism::Rayon(1, 2, 3, 8, 16)` against
//! `None`; 2-core Intel Xeon with AVX-512 and FMA, the dev machine) found no bit
//! differing, but gemm does not promise this, and its packing and small-size paths do
//! consult the thread count. The summation order over `k` still depends on the block
//! shape (so on `(m, n, k)`), on the cache sizes gemm detects and on the SIMD kernel it
//! picks at run time (AVX-512, AVX2 + FMA, or scalar): results are bit-identical run to
//! run and for any thread count on one machine, but an AVX-512 machine and an AVX2-only
//! one may differ in the last bits.
//!
//! gemm's AVX-512 kernels are compiled in through its `x86-v4` feature (off by default
//! in gemm; AVX-512 intrinsics are stable Rust since 1.89). Without it gemm used its AVX2
//! kernel even on AVX-512 CPUs: on the 2-core Emerald Rapids Xeon of
//! `benches/RESULTS.md`, the demo MLP's training step went from about 1.75 ms to
//! 1.35 ms with it.
//!
//! Strided inputs (such as [`Tensor::t`] views) are passed to gemm as row and column
//! strides, so transposes are never copied.
//!
//! Under portable arithmetic ([`crate::use_portable_arithmetic`], docs/contract.md §14)
//! gemm is replaced by ditto's own kernels ([`crate::portable::matmul`]), whose order of
//! operations is defined: the same bits with any SIMD level and thread count, and on
//! CUDA.

#[cfg(feature = "cuda")]
pub(crate) mod batch_runs;
#[cfg(feature = "cuda")]
pub(crate) mod batched_cuda;
pub(crate) mod batched_matmul;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub(crate) mod gemm_blocks;
#[cfg(feature = "cuda")]
pub(crate) mod gemm_elements;
#[cfg(feature = "cuda")]
pub(crate) mod portable_cuda;
pub(crate) mod product;

use crate::ops::matmul::product::{product_2d, ProductElement};
use crate::portable::matmul::Operand;
use crate::{Element, Result, Tensor, TensorError};

/// A 2-D CPU tensor as an operand over its storage.
fn operand<'a, T>(t: &Tensor, data: &'a [T]) -> Operand<'a, T> {
    Operand {
        data,
        offset: t.storage_offset(),
        rows: t.dims()[0],
        cols: t.dims()[1],
        row_stride: t.strides()[0],
        col_stride: t.strides()[1],
    }
}

/// The shapes of a 2-D product: both rank 2, inner sizes equal.
fn check_2d(lhs: &Tensor, rhs: &Tensor) -> Result<()> {
    const OP: &str = "matmul";
    for t in [lhs, rhs] {
        if t.rank() != 2 {
            return Err(TensorError::RankMismatch {
                op: OP,
                expected: 2,
                got: t.rank(),
            });
        }
    }
    if lhs.dims()[1] != rhs.dims()[0] {
        return Err(TensorError::ShapeMismatch {
            op: OP,
            lhs: lhs.dims().to_vec(),
            rhs: rhs.dims().to_vec(),
        });
    }
    Ok(())
}

impl Tensor {
    /// Matrix product. Of `(m, k)` and `(k, n)` tensors, a contiguous `(m, n)` tensor;
    /// of two tensors of the same rank above 2, `[..., m, k]` and `[..., k, n]` with the
    /// same leading (batch) dimensions, the product of each pair of matrices, a
    /// contiguous `[..., m, n]` tensor (PyTorch's `matmul` without broadcasting; see
    /// `ops/matmul/batched_matmul.rs`). Both must be on one device and share an f32 / f64
    /// dtype. On CUDA this is cuBLAS (see the `ops::cuda` matmul docs for what that
    /// means for reproducibility across GPU models), or ditto's portable kernel under
    /// portable arithmetic. Inside a bf16 [`crate::autocast`] scope, f32 operands are
    /// multiplied rounded to bf16, with f32 sums.
    #[track_caller]
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        audited!("matmul", [self, rhs], {
            const OP: &str = "matmul";
            self.require_compatible(OP, rhs)?;
            let batch = if self.rank() > 2 {
                Some(crate::ops::matmul::batched_matmul::batched_dims(
                    OP, self, rhs,
                )?)
            } else {
                check_2d(self, rhs)?;
                None
            };
            // Inside a bf16 autocast scope (autocast.rs): cuBLAS's bf16 GEMM on CUDA in
            // default arithmetic, else the product of the operands rounded to bf16.
            let rounded = if crate::autocast::is_bf16_product(self, rhs) {
                #[cfg(feature = "cuda")]
                if self.device() != crate::Device::Cpu && !crate::are_portable_arithmetic_enabled()
                {
                    let out_dims = batch.unwrap_or_else(|| vec![self.dims()[0], rhs.dims()[1]]);
                    return crate::ops::cuda::matmul_bf16(self, rhs, &out_dims);
                }
                Some((self.round_to_bf16()?, rhs.round_to_bf16()?))
            } else {
                None
            };
            let (lhs, rhs) = rounded.as_ref().map_or((self, rhs), |(a, b)| (a, b));
            if let Some(dims) = batch {
                on_cuda!(lhs => crate::ops::cuda::batched_matmul(lhs, rhs, &dims));
                lhs.require_cpu(OP)?;
                let portable = crate::are_portable_arithmetic_enabled();
                return with_float_dtype!(lhs.dtype(), OP, T => {
                    crate::ops::matmul::batched_matmul::batched_matmul_cpu::<T>(lhs, rhs, &dims, portable)
                });
            }
            on_cuda!(lhs => crate::ops::cuda::matmul(lhs, rhs));
            lhs.require_cpu(OP)?;
            let dims = [lhs.dims()[0], rhs.dims()[1]];
            let portable = crate::are_portable_arithmetic_enabled();
            with_float_dtype!(lhs.dtype(), OP, T => {
                let (a, b) = (T::slice_of(lhs)?, T::slice_of(rhs)?);
                let out = product_2d(operand(lhs, a), operand(rhs, b), portable)?;
                Tensor::from_cpu_storage(T::into_storage(out), &dims)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor, TensorError};

    /// Naive reference in f64.
    fn reference(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        out
    }

    #[test]
    fn small_products_and_transposed_views() {
        let a = Tensor::from_vec(vec![1f32, 2., 3., 4., 5., 6.], &[2, 3], Device::Cpu).unwrap();
        let b = Tensor::from_vec(vec![7f32, 8., 9., 10., 11., 12.], &[3, 2], Device::Cpu).unwrap();
        let c = a.matmul(&b).unwrap();
        assert_eq!(c.dims(), &[2, 2]);
        assert_eq!(c.to_vec::<f32>().unwrap(), vec![58., 64., 139., 154.]);
        // a^T (3x2) x a (2x3) using views.
        let at = a.t().unwrap();
        let g = at.matmul(&a).unwrap();
        let want = at.contiguous().unwrap().matmul(&a).unwrap();
        assert_eq!(g.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
        assert_eq!(g.to_vec::<f32>().unwrap()[0], 17.);
        // A narrowed view with a non-zero offset.
        let row = a.narrow(0, 1, 1).unwrap();
        assert_eq!(
            row.matmul(&b).unwrap().to_vec::<f32>().unwrap(),
            vec![139., 154.]
        );
    }

    #[test]
    fn larger_products_match_a_reference() {
        let (m, k, n) = (37, 129, 23);
        let a: Vec<f64> = (0..m * k)
            .map(|i| ((i * 7919) % 101) as f64 / 50.0 - 1.0)
            .collect();
        let b: Vec<f64> = (0..k * n)
            .map(|i| ((i * 104_729) % 97) as f64 / 48.0 - 1.0)
            .collect();
        let ta = Tensor::from_vec(a.clone(), &[m, k], Device::Cpu).unwrap();
        let tb = Tensor::from_vec(b.clone(), &[k, n], Device::Cpu).unwrap();
        let got = ta.matmul(&tb).unwrap().to_vec::<f64>().unwrap();
        for (g, w) in got.iter().zip(reference(&a, &b, m, k, n)) {
            assert!((g - w).abs() < 1e-9, "{g} vs {w}");
        }
        let again = ta.matmul(&tb).unwrap().to_vec::<f64>().unwrap();
        assert_eq!(got, again);
        let empty = Tensor::zeros(&[3, 0], DType::F64, Device::Cpu).unwrap();
        let z = empty.matmul(&Tensor::zeros(&[0, 2], DType::F64, Device::Cpu).unwrap());
        assert_eq!(z.unwrap().to_vec::<f64>().unwrap(), vec![0.0; 6]);
    }

    #[test]
    fn shape_errors() {
        let a = Tensor::zeros(&[2, 3], DType::F32, Device::Cpu).unwrap();
        assert!(matches!(
            a.matmul(&a),
            Err(TensorError::ShapeMismatch { .. })
        ));
        let v = Tensor::zeros(&[3], DType::F32, Device::Cpu).unwrap();
        assert!(matches!(
            a.matmul(&v),
            Err(TensorError::RankMismatch { .. })
        ));
        let i = Tensor::zeros(&[3, 1], DType::I64, Device::Cpu).unwrap();
        assert!(matches!(
            a.matmul(&i),
            Err(TensorError::DTypeMismatch { .. })
        ));
    }
}
