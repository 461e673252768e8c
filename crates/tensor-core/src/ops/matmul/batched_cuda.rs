//! Batched `matmul` on CUDA, `[..., m, k] x [..., k, n]` (attention's `q k^T` and `p v`):
//! each batch entry is the 2-D product the 2-D `matmul` computes for those two matrices.
//!
//! Under portable arithmetic (f32) one launch of ditto's tiled kernel
//! (`ditto_portable_matmul_batched_f32` in `cuda/portable_matmul.cu`) covers every entry,
//! each element one fused multiply-add chain over `k` ascending: the CPU's bits. Otherwise
//! the entries are cuBLAS gemms, each the gemm a 2-D product of it makes, written into
//! their places in the output (cuBLAS's reproducibility, see the `matmul` docs), in as
//! few strided-batched calls as one stride per operand allows (`batch_runs.rs`): one for
//! a dense batch; for attention's heads of `[b, t, h, d]` activations, one per head (or
//! per sequence, when heads outnumber sequences) instead of one per entry: a step of the
//! GPT demo (2 layers, 2 heads, batch 8) makes 51 gemm calls instead of 219. Operands
//! are read through their strides, batch dimensions included, so the transposed views
//! of attention are never copied (an operand whose matrix dims are neither row- nor
//! column-major is gathered once, whole).

use cudarc::driver::{LaunchConfig, PushKernelArg};

use crate::cuda::{module_cache, PORTABLE_MATMUL};
use crate::ops::cuda::{empty, launch_failed, output_storage, storage_of, uninit};
use crate::ops::kernel_layout::{kernel_shape, kernel_view};
use crate::ops::matmul::cuda::product;
use crate::ops::matmul::gemm_elements::Same;
use crate::{DType, Result, Shape, Tensor, TensorError};

/// Rows and columns of C per block of the portable kernel, threads per block side.
const TILE: usize = 64;
const THREADS: u32 = 16;
/// The driver's limit on a grid's z dimension; the kernel strides over further entries.
const MAX_GRID_Z: usize = 65_535;

/// The product of CUDA tensors `lhs` `[..., m, k]` and `rhs` `[..., k, n]` of one float
/// dtype on one device, whose dims `Tensor::matmul` checked (`out_dims` is `[..., m,
/// n]`), as a contiguous tensor.
pub(crate) fn batched_matmul(lhs: &Tensor, rhs: &Tensor, out_dims: &[usize]) -> Result<Tensor> {
    let rank = out_dims.len();
    let k = lhs.dims()[rank - 1];
    let ordinal = storage_of(lhs)?.1;
    if Shape::new(out_dims)?.elem_count() == 0 || k == 0 {
        return empty(out_dims, lhs.dtype(), ordinal); // zeros: empty sums
    }
    match lhs.dtype() {
        DType::F32 if crate::are_portable_arithmetic_enabled() => portable(lhs, rhs, out_dims),
        DType::F32 => product::<Same<f32>>(lhs, rhs, out_dims),
        DType::F64 => product::<Same<f64>>(lhs, rhs, out_dims),
        other => Err(TensorError::UnsupportedDType {
            op: "matmul",
            dtype: other,
            supported: "f32, f64",
        }),
    }
}

/// Every entry in one launch of the portable kernel (f32).
fn portable(lhs: &Tensor, rhs: &Tensor, out_dims: &[usize]) -> Result<Tensor> {
    const OP: &str = "matmul";
    const KERNEL: &str = "ditto_portable_matmul_batched_f32";
    let rank = out_dims.len();
    let (m, n, k) = (out_dims[rank - 2], out_dims[rank - 1], lhs.dims()[rank - 1]);
    let batch_dims = &out_dims[..rank - 2];
    let entries: usize = batch_dims.iter().product();
    let (a, ordinal) = storage_of(lhs)?;
    let (b, _) = storage_of(rhs)?;
    let batch = kernel_shape(OP, batch_dims)?;
    let a_batch = kernel_view(OP, lhs.storage_offset(), &lhs.strides()[..rank - 2])?;
    let b_batch = kernel_view(OP, rhs.storage_offset(), &rhs.strides()[..rank - 2])?;
    let blocks = |len: usize, what: &str| {
        u32::try_from(len.div_ceil(TILE))
            .ok()
            .filter(|&b| what == "columns" || b <= 65_535)
            .ok_or_else(|| TensorError::InvalidArgument {
                op: OP,
                message: format!("{len} {what} exceed the portable CUDA kernel's grid"),
            })
    };
    let cfg = LaunchConfig {
        grid_dim: (
            blocks(n, "columns")?,
            blocks(m, "rows")?,
            entries.min(MAX_GRID_Z) as u32,
        ),
        block_dim: (THREADS, THREADS, 1),
        shared_mem_bytes: 0,
    };
    let func = module_cache::function(ordinal, &PORTABLE_MATMUL, KERNEL)?;
    let u64_of = |x: usize| x as u64;
    let (entries64, m64, n64, k64) = (u64_of(entries), u64_of(m), u64_of(n), u64_of(k));
    let (a_row, a_col) = (
        u64_of(lhs.strides()[rank - 2]),
        u64_of(lhs.strides()[rank - 1]),
    );
    let (b_row, b_col) = (
        u64_of(rhs.strides()[rank - 2]),
        u64_of(rhs.strides()[rank - 1]),
    );
    let mut out = uninit(out_dims, lhs.dtype(), ordinal)?;
    let (a_bytes, b_bytes) = (a.bytes(), b.bytes());
    let dst = output_storage(&mut out)?;
    let stream = dst.stream()?;
    let mut args = stream.launch_builder(&func);
    args.arg(&entries64)
        .arg(&batch)
        .arg(&a_batch)
        .arg(&b_batch)
        .arg(&m64)
        .arg(&n64)
        .arg(&k64)
        .arg(a_bytes)
        .arg(&a_row)
        .arg(&a_col)
        .arg(b_bytes)
        .arg(&b_row)
        .arg(&b_col)
        .arg(dst.bytes_mut());
    // SAFETY: matches `ditto_portable_matmul_batched_f32(u64 entries, DittoShape,
    // DittoView, DittoView, u64 m, u64 n, u64 k, const float* a, u64 a_row, u64 a_col,
    // const float* b, u64 b_row, u64 b_col, float* c)`: every index the kernel forms is
    // an element of a valid view of its operand's storage (its batch offset plus `i *
    // row + p * col`), and C is a fresh dense buffer of `entries * m * n` elements, every
    // one written (k >= 1, and the grid's tiles cover each entry's m x n).
    unsafe { args.launch(cfg) }.map_err(launch_failed(ordinal, KERNEL))?;
    Ok(out)
}
