//! `matmul` on CUDA through cuBLAS (`sgemm` / `dgemm`, `cublasGemmEx` for bf16 autocast).
//!
//! # Reproducibility
//! cuBLAS returns bit-identical results run to run on GPUs of the same architecture and
//! SM count with the same cuBLAS version, when one stream is used (ditto issues all work
//! on the device's default stream). It does not promise the same bits across GPU models
//! or versions, so a training run resumed on a different GPU model may drift in the last
//! bits. The f32 / f64 handle is set to `CUBLAS_PEDANTIC_MATH`, so f32 products never use
//! TF32; bf16 autocast's products use a second handle in default math, for the tensor
//! cores (`cuda_runtime::cublas`). Each handle has a fixed workspace, so captured (CUDA
//! graph) and eager products use the same algorithm.
//!
//! # Layout
//! cuBLAS is column-major. A row-major product `C = A * B` is computed as
//! `C^T = B^T * A^T`: the memory of a row-major `(r, c)` view, read column-major, is its
//! transpose, so row-major operands are passed untransposed and column-major ones (such
//! as [`Tensor::t`] views) with `CUBLAS_OP_T`. Other strided views are gathered first.

use cuda_runtime::CudaError;
use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{CudaView, DeviceRepr};

use crate::ops::cuda::{dense, empty, output_storage, storage_of, to_bf16, uninit};
use crate::ops::matmul::batch_runs::BatchCall;
use crate::ops::matmul::gemm_elements::{Bf16IntoF32, GemmElements, Same};
use crate::ops::Float;
use crate::{DType, Element, Result, Tensor, TensorError};

/// How cuBLAS reads one operand: transposed or not, and its leading dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BlasOperand {
    transpose: bool,
    leading: usize,
}

/// The cuBLAS reading of a 2-D view `(rows, cols)` with strides `(s0, s1)`, or `None`
/// when it is neither row- nor column-major (then it is gathered first). The stride of
/// a dimension of size 1 never matters.
fn blas_operand(dims: &[usize], strides: &[usize]) -> Option<BlasOperand> {
    let (rows, cols, s0, s1) = (dims[0], dims[1], strides[0], strides[1]);
    let row_major = cols <= 1 || s1 == 1;
    if row_major {
        let leading = if rows <= 1 { cols.max(1) } else { s0 };
        if leading >= cols.max(1) {
            return Some(BlasOperand {
                transpose: false,
                leading,
            });
        }
    }
    let column_major = rows <= 1 || s0 == 1;
    if column_major {
        let leading = if cols <= 1 { rows.max(1) } else { s1 };
        if leading >= rows.max(1) {
            return Some(BlasOperand {
                transpose: true,
                leading,
            });
        }
    }
    None
}

/// The column-major GEMM cuBLAS runs for the row-major `C (m x n) = A (m x k) * B (k x n)`:
/// `C^T (n x m) = op(B's memory) (n x k) * op(A's memory) (k x m)`, so cuBLAS's first
/// operand is B's memory and its second A's, and C comes out row-major.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct GemmPlan {
    transa: bool,
    transb: bool,
    m: i32,
    n: i32,
    k: i32,
    lda: i32,
    ldb: i32,
    ldc: i32,
}

impl GemmPlan {
    fn new(m: usize, k: usize, n: usize, a: BlasOperand, b: BlasOperand) -> Result<Self> {
        Ok(GemmPlan {
            transa: b.transpose,
            transb: a.transpose,
            m: blas_int(n, "n")?,
            n: blas_int(m, "m")?,
            k: blas_int(k, "k")?,
            lda: blas_int(b.leading, "leading dimension of rhs")?,
            ldb: blas_int(a.leading, "leading dimension of lhs")?,
            ldc: blas_int(n, "n")?,
        })
    }
}

fn cublas_error(ordinal: usize, op: &'static str) -> impl FnOnce(String) -> TensorError {
    move |message| {
        CudaError::Driver {
            ordinal,
            op,
            message,
        }
        .into()
    }
}

/// An i32 for cuBLAS, or an error naming the dimension that is too large.
fn blas_int(value: usize, what: &str) -> Result<i32> {
    i32::try_from(value).map_err(|_| TensorError::InvalidArgument {
        op: "matmul",
        message: format!("{what} = {value} exceeds cuBLAS's 32-bit limit"),
    })
}

/// The typed device view of `t`'s storage from element `start` on.
fn typed_view<T>(t: &Tensor, start: usize) -> Result<CudaView<'_, T>> {
    let (s, ordinal) = storage_of(t)?;
    let size = std::mem::size_of::<T>();
    let short =
        || cublas_error(ordinal, "matmul")("device buffer shorter than the tensor's view".into());
    let bytes = s.bytes().try_slice(start * size..).ok_or_else(short)?;
    let len = bytes.len() / size;
    // SAFETY: the storage holds elements of `T` (the caller matched T to the dtype), so
    // reinterpreting whole elements from an element boundary is sound.
    unsafe { bytes.transmute::<T>(len) }.ok_or_else(short)
}

/// `lhs (m x k) * rhs (k x n)` for CUDA tensors of one float dtype on one device, with
/// shapes already checked by [`Tensor::matmul`].
pub(crate) fn matmul(lhs: &Tensor, rhs: &Tensor) -> Result<Tensor> {
    if lhs.dtype() == DType::F32 && crate::are_portable_arithmetic_enabled() {
        return crate::ops::matmul::portable_cuda::portable_matmul(lhs, rhs);
    }
    match lhs.dtype() {
        DType::F32 => gemm::<f32>(lhs, rhs),
        DType::F64 => gemm::<f64>(lhs, rhs),
        other => Err(TensorError::UnsupportedDType {
            op: "matmul",
            dtype: other,
            supported: "f32, f64",
        }),
    }
}

fn gemm<T: Float + DeviceRepr>(lhs: &Tensor, rhs: &Tensor) -> Result<Tensor>
where
    CudaBlas: Gemm<T>,
{
    let (m, k, n) = (lhs.dims()[0], lhs.dims()[1], rhs.dims()[1]);
    let ordinal = storage_of(lhs)?.1;
    if m == 0 || n == 0 || k == 0 {
        return empty(&[m, n], lhs.dtype(), ordinal); // zeros: an empty sum
    }
    product::<Same<T>>(lhs, rhs, &[m, n])
}

/// bf16 autocast's product of f32 CUDA tensors in default arithmetic, 2-D or batched
/// (`out_dims` `[..., m, n]`, shapes checked by [`Tensor::matmul`]): both operands
/// narrowed to dense bf16 on the device, then cuBLAS's bf16 GEMM into f32
/// (`gemm_elements.rs`), one strided-batched call per run of entries.
pub(crate) fn matmul_bf16(lhs: &Tensor, rhs: &Tensor, out_dims: &[usize]) -> Result<Tensor> {
    let k = lhs.dims()[lhs.rank() - 1];
    let ordinal = storage_of(lhs)?.1;
    if out_dims.contains(&0) || k == 0 {
        return empty(out_dims, DType::F32, ordinal); // zeros: empty sums
    }
    product::<Bf16IntoF32>(&to_bf16(lhs)?, &to_bf16(rhs)?, out_dims)
}

/// The product of `lhs` `[..., m, k]` and `rhs` `[..., k, n]` (none of the sizes 0) as
/// gemms of `E`: one call for a 2-D product, strided-batched calls grouped by
/// `batch_runs.rs` otherwise, each entry the gemm a 2-D product of it makes.
pub(crate) fn product<E: GemmElements>(
    lhs: &Tensor,
    rhs: &Tensor,
    out_dims: &[usize],
) -> Result<Tensor> {
    let rank = out_dims.len();
    let ordinal = storage_of(lhs)?.1;
    let operands = GemmOperands::new(lhs, rhs)?;
    // Every gemm (beta = 0) writes its whole block of C without reading it.
    let mut out = uninit(out_dims, <E::Out as Element>::DTYPE, ordinal)?;
    if rank == 2 {
        operands.run::<E>(operands.single(), &mut out)?;
        return Ok(out);
    }
    let batch = |t: &Tensor| t.strides()[..rank - 2].to_vec();
    let (a, b, c) = (batch(&operands.lhs), batch(&operands.rhs), batch(&out));
    let offsets = [
        operands.lhs.storage_offset(),
        operands.rhs.storage_offset(),
        0,
    ];
    let max_count = i32::MAX as usize; // cuBLAS's batch count is an int
    let calls = crate::ops::matmul::batch_runs::batch_calls(
        &out_dims[..rank - 2],
        [&a, &b, &c],
        offsets,
        max_count,
    );
    for call in calls {
        operands.run::<E>(call, &mut out)?;
    }
    Ok(out)
}

/// The two operands of a product, `lhs [..., m, k]` and `rhs [..., k, n]` (2-D, or
/// batched with the same batch dims), as cuBLAS reads them: in place when their matrix
/// dims (the last two) are row- or column-major, which holds for every entry alike,
/// else gathered into a dense copy first. Shared by the 2-D product (one gemm) and the
/// batched one (`batched_cuda.rs`: strided-batched gemms over its entries), so each
/// entry of a batch is the very gemm a 2-D product of it makes.
pub(crate) struct GemmOperands {
    pub(crate) lhs: Tensor,
    pub(crate) rhs: Tensor,
    plan: GemmPlan,
    /// The output's entry size, `m * n`.
    entry: usize,
}

impl GemmOperands {
    /// `m, n, k >= 1`.
    pub(crate) fn new(lhs: &Tensor, rhs: &Tensor) -> Result<Self> {
        let rank = lhs.rank();
        let (m, k, n) = (
            lhs.dims()[rank - 2],
            lhs.dims()[rank - 1],
            rhs.dims()[rank - 1],
        );
        let readable = |t: &Tensor| -> Result<(Tensor, BlasOperand)> {
            let matrix = |t: &Tensor| blas_operand(&t.dims()[rank - 2..], &t.strides()[rank - 2..]);
            if let Some(op) = matrix(t) {
                return Ok((t.clone(), op));
            }
            let d = dense(t)?;
            let op = matrix(&d).expect("a dense view is row-major");
            Ok((d, op))
        };
        let ((a, a_op), (b, b_op)) = (readable(lhs)?, readable(rhs)?);
        Ok(GemmOperands {
            lhs: a,
            rhs: b,
            plan: GemmPlan::new(m, k, n, a_op, b_op)?,
            entry: m * n,
        })
    }

    /// The whole product as one entry (a 2-D product), written at the output's start.
    pub(crate) fn single(&self) -> BatchCall {
        BatchCall {
            count: 1,
            start: [self.lhs.storage_offset(), self.rhs.storage_offset(), 0],
            stride: [0; 3],
        }
    }

    /// The products of the entries of `call` (offsets in elements of the operands'
    /// storage, of `E::In`, and of `out`'s, a fresh dense tensor of `E::Out`): one gemm
    /// for one entry, else one strided-batched gemm. Each entry's product covers its `m
    /// x n` block of `out` without reading it (beta = 0).
    pub(crate) fn run<E: GemmElements>(&self, call: BatchCall, out: &mut Tensor) -> Result<()> {
        type T<E> = <E as GemmElements>::Out;
        let (storage, ordinal) = storage_of(&self.lhs)?;
        let stream = storage.stream()?;
        let plan = self.plan;
        let operation = |transpose: bool| {
            if transpose {
                cublasOperation_t::CUBLAS_OP_T
            } else {
                cublasOperation_t::CUBLAS_OP_N
            }
        };
        let cfg = GemmConfig {
            transa: operation(plan.transa),
            transb: operation(plan.transb),
            m: plan.m,
            n: plan.n,
            k: plan.k,
            alpha: T::<E>::from_f64(1.0),
            lda: plan.lda,
            ldb: plan.ldb,
            beta: T::<E>::from_f64(0.0),
            ldc: plan.ldc,
        };
        let blas = E::handle(ordinal)?;
        // cuBLAS's first operand is rhs's memory, its second lhs's (see `GemmPlan`).
        let a_view = typed_view::<E::In>(&self.rhs, call.start[1])?;
        let b_view = typed_view::<E::In>(&self.lhs, call.start[0])?;
        let too_short = || cublas_error(ordinal, "matmul")("output buffer too short".into());
        let len = (call.count - 1) * call.stride[2] + self.entry;
        let dst = output_storage(out)?;
        let start = call.start[2] * std::mem::size_of::<T<E>>();
        let mut c_bytes = dst
            .bytes_mut()
            .try_slice_mut(start..)
            .ok_or_else(too_short)?;
        // SAFETY: the output holds elements of E::Out; `transmute_mut` checks that `len`
        // of them fit from `call.start[2]` on.
        let mut c_view = unsafe { c_bytes.transmute_mut::<T<E>>(len) }.ok_or_else(too_short)?;
        let failed = |e| cublas_error(ordinal, "cublas gemm")(format!("{e:?}"));
        if call.count == 1 {
            // SAFETY: the config describes views that lie inside their buffers: each
            // operand's leading dimension and extent come from a valid row- or
            // column-major view of its storage (see `blas_operand`), and C is a dense n x
            // m column-major (m x n row-major) block of `out`. The handle's stream is the
            // device's default stream, like the buffers'.
            return unsafe { E::gemm(&blas, &stream, cfg, &a_view, &b_view, &mut c_view) }
                .map_err(failed);
        }
        let stride = |s: usize| {
            i64::try_from(s).map_err(|_| TensorError::InvalidArgument {
                op: "matmul",
                message: format!("batch stride {s} exceeds cuBLAS's 64-bit limit"),
            })
        };
        let batched = StridedBatchedConfig {
            gemm: cfg,
            batch_size: blas_int(call.count, "batch entries per call")?,
            stride_a: stride(call.stride[1])?,
            stride_b: stride(call.stride[0])?,
            stride_c: stride(call.stride[2])?,
        };
        // SAFETY: as for one gemm, for every entry: `call` comes from `batch_calls`, whose
        // entries `start + i * stride` are the storage offsets of the operands' entries
        // (valid views, so inside their buffers), and the output's are its dense blocks,
        // `stride[2] >= m * n` apart, so no two entries write the same element.
        unsafe { E::gemm_strided_batched(&blas, &stream, batched, &a_view, &b_view, &mut c_view) }
            .map_err(failed)
    }
}

#[cfg(test)]
mod tests {
    use super::{blas_operand, BlasOperand, GemmPlan};
    use crate::{Device, Tensor};

    /// cuBLAS's `gemm` by its definition (column-major, `op` = transpose or not), on host
    /// slices: C = op(A) * op(B) with alpha 1, beta 0. Sums in f64: only the indexing is
    /// under test here.
    fn column_major_gemm(plan: GemmPlan, a: &[f64], b: &[f64], c: &mut [f64]) {
        let (m, n, k) = (plan.m as usize, plan.n as usize, plan.k as usize);
        let (lda, ldb, ldc) = (plan.lda as usize, plan.ldb as usize, plan.ldc as usize);
        let op_a = |i: usize, p: usize| {
            if plan.transa {
                a[p + i * lda]
            } else {
                a[i + p * lda]
            }
        };
        let op_b = |p: usize, j: usize| {
            if plan.transb {
                b[j + p * ldb]
            } else {
                b[p + j * ldb]
            }
        };
        for i in 0..m {
            for j in 0..n {
                c[i + j * ldc] = (0..k).map(|p| op_a(i, p) * op_b(p, j)).sum();
            }
        }
    }

    #[test]
    fn the_plan_computes_row_major_products_for_every_view_layout() {
        let grid = |r: usize, c: usize, salt: f64| {
            let v: Vec<f64> = (0..r * c).map(|i| (i as f64 * 0.37 + salt).sin()).collect();
            Tensor::from_vec(v, &[r, c], Device::Cpu).unwrap()
        };
        let (m, k, n) = (5, 4, 3);
        // Each operand as a dense tensor, a transpose view, and a narrowed dense tensor.
        let lhs = [
            grid(m, k, 0.1),
            grid(k, m, 0.2).t().unwrap(),
            grid(m, k + 3, 0.3).narrow(1, 2, k).unwrap(),
            grid(1, k, 0.4).narrow(0, 0, 1).unwrap(),
        ];
        let rhs = [
            grid(k, n, 0.5),
            grid(n, k, 0.6).t().unwrap(),
            grid(k + 2, n, 0.7).narrow(0, 1, k).unwrap(),
        ];
        for a in &lhs {
            for b in &rhs {
                let (a_op, b_op) = (
                    blas_operand(a.dims(), a.strides()).unwrap(),
                    blas_operand(b.dims(), b.strides()).unwrap(),
                );
                let (rows, cols) = (a.dims()[0], b.dims()[1]);
                let plan = GemmPlan::new(rows, k, cols, a_op, b_op).unwrap();
                let storage = |t: &Tensor| {
                    <f64 as crate::Element>::slice(t.cpu_storage().unwrap()).unwrap()
                        [t.storage_offset()..]
                        .to_vec()
                };
                let mut c = vec![f64::NAN; rows * cols];
                column_major_gemm(plan, &storage(b), &storage(a), &mut c);
                let want = a.matmul(b).unwrap().to_vec::<f64>().unwrap();
                for (x, y) in c.iter().zip(&want) {
                    assert!(
                        (x - y).abs() < 1e-12,
                        "{:?} x {:?}: {c:?} vs {want:?}",
                        a.strides(),
                        b.strides()
                    );
                }
            }
        }
    }

    #[test]
    fn row_and_column_major_views_are_read_in_place() {
        let row = |leading| {
            Some(BlasOperand {
                transpose: false,
                leading,
            })
        };
        let col = |leading| {
            Some(BlasOperand {
                transpose: true,
                leading,
            })
        };
        // A dense (3, 4) tensor, its transpose view (4, 3), and a column slice of it.
        assert_eq!(blas_operand(&[3, 4], &[4, 1]), row(4));
        assert_eq!(blas_operand(&[4, 3], &[1, 4]), col(4));
        assert_eq!(blas_operand(&[3, 2], &[4, 1]), row(4));
        // Size-1 dims: any stride; the leading dimension still covers a row / column.
        assert_eq!(blas_operand(&[1, 5], &[0, 1]), row(5));
        assert_eq!(blas_operand(&[5, 1], &[1, 0]), row(1));
        // Neither layout (every other element): gathered first.
        assert_eq!(blas_operand(&[3, 4], &[8, 2]), None);
    }
}
