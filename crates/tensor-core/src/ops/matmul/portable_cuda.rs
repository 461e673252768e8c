//! `matmul` on CUDA under portable arithmetic (docs/contract.md §14): ditto's tiled
//! kernel (`cuda/portable_matmul.cu`) instead of cuBLAS, so every output element is one
//! chain of fused multiply-adds over `k` ascending, the same bits as the CPU's portable
//! kernels on any GPU. f32 only: an f64 product keeps cuBLAS (portable arithmetic does not
//! cover f64).

use cudarc::driver::{LaunchConfig, PushKernelArg};

use crate::cuda::{module_cache, PORTABLE_MATMUL};
use crate::ops::cuda::{empty, launch_failed, output_storage, storage_of};
use crate::{Result, Tensor, TensorError};

/// Rows and columns of C per block (`DITTO_PMM_TILE`), threads per block side.
const TILE: usize = 64;
const THREADS: u32 = 16;

/// `lhs (m x k) * rhs (k x n)` for f32 CUDA tensors on one device, shapes already checked.
pub(crate) fn portable_matmul(lhs: &Tensor, rhs: &Tensor) -> Result<Tensor> {
    const KERNEL: &str = "ditto_portable_matmul_f32";
    let (m, k, n) = (lhs.dims()[0], lhs.dims()[1], rhs.dims()[1]);
    let (a, ordinal) = storage_of(lhs)?;
    let (b, _) = storage_of(rhs)?;
    let mut out = empty(&[m, n], lhs.dtype(), ordinal)?;
    if m == 0 || n == 0 || k == 0 {
        return Ok(out); // zeros: empty chains
    }
    let blocks = |len: usize, what: &str| {
        u32::try_from(len.div_ceil(TILE))
            .ok()
            .filter(|&b| what == "columns" || b <= 65_535)
            .ok_or_else(|| TensorError::InvalidArgument {
                op: "matmul",
                message: format!("{len} {what} exceed the portable CUDA kernel's grid"),
            })
    };
    let cfg = LaunchConfig {
        grid_dim: (blocks(n, "columns")?, blocks(m, "rows")?, 1),
        block_dim: (THREADS, THREADS, 1),
        shared_mem_bytes: 0,
    };
    let func = module_cache::function(ordinal, &PORTABLE_MATMUL, KERNEL)?;
    let u64_of = |x: usize| x as u64;
    let (m64, n64, k64) = (u64_of(m), u64_of(n), u64_of(k));
    let (a_offset, a_row, a_col) = (
        u64_of(lhs.storage_offset()),
        u64_of(lhs.strides()[0]),
        u64_of(lhs.strides()[1]),
    );
    let (b_offset, b_row, b_col) = (
        u64_of(rhs.storage_offset()),
        u64_of(rhs.strides()[0]),
        u64_of(rhs.strides()[1]),
    );
    let (a_bytes, b_bytes) = (a.bytes(), b.bytes());
    let dst = output_storage(&mut out)?;
    let stream = dst.stream()?;
    let mut args = stream.launch_builder(&func);
    args.arg(&m64)
        .arg(&n64)
        .arg(&k64)
        .arg(a_bytes)
        .arg(&a_offset)
        .arg(&a_row)
        .arg(&a_col)
        .arg(b_bytes)
        .arg(&b_offset)
        .arg(&b_row)
        .arg(&b_col)
        .arg(dst.bytes_mut());
    // SAFETY: matches `ditto_portable_matmul_f32(u64 m, u64 n, u64 k, const float* a,
    // u64 a_offset, u64 a_row, u64 a_col, const float* b, u64 ..., float* c)`: both
    // operands are valid f32 views of their storages (every index the kernel forms is
    // `offset + i * row + p * col` inside the view), C is a fresh dense m x n buffer; the
    // grid covers C in 64 x 64 tiles with 16 x 16 threads.
    unsafe { args.launch(cfg) }.map_err(launch_failed(ordinal, KERNEL))?;
    Ok(out)
}
