//! How the tensor-op kernels (`cuda/tensor_ops.cuh`) see a tensor: its shape and each
//! operand's view as fixed-size `repr(C)` structs, and the `(outer, size, inner)` lanes
//! of a reduction. Shared by the CUDA launchers and the host parity shim, so both hand
//! the kernel bodies the same arguments.

use crate::{Result, Tensor, TensorError};

/// The most dimensions a tensor may have for the CUDA kernels (`DITTO_MAX_RANK`).
pub const MAX_RANK: usize = 8;

/// `DittoShape` in `tensor_ops.cu`: the dims a kernel walks in row-major order.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelShape {
    rank: u64,
    dims: [u64; MAX_RANK],
}

/// `DittoView` in `tensor_ops.cu`: where logical element `i` lives in a buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelView {
    offset: u64,
    strides: [u64; MAX_RANK],
}

// SAFETY: both are `repr(C)` structs of `u64`s with the exact field order and sizes of
// `DittoShape` / `DittoView`, so the kernel reads the bytes it expects.
#[cfg(feature = "cuda")]
unsafe impl cudarc::driver::DeviceRepr for KernelShape {}
// SAFETY: as above.
#[cfg(feature = "cuda")]
unsafe impl cudarc::driver::DeviceRepr for KernelView {}

/// Errors unless `dims` fits the kernels' fixed-size index arrays.
fn check_rank(op: &'static str, dims: &[usize]) -> Result<()> {
    if dims.len() > MAX_RANK {
        return Err(TensorError::InvalidArgument {
            op,
            message: format!(
                "CUDA kernels support tensors of up to {MAX_RANK} dimensions, got {} ({dims:?})",
                dims.len()
            ),
        });
    }
    Ok(())
}

/// The kernel form of `dims`.
pub fn kernel_shape(op: &'static str, dims: &[usize]) -> Result<KernelShape> {
    check_rank(op, dims)?;
    let mut shape = KernelShape {
        rank: dims.len() as u64,
        dims: [1; MAX_RANK],
    };
    for (d, &size) in shape.dims.iter_mut().zip(dims) {
        *d = size as u64;
    }
    Ok(shape)
}

/// The kernel form of a view with `strides` (0 for broadcast dims) from `offset`.
pub fn kernel_view(op: &'static str, offset: usize, strides: &[usize]) -> Result<KernelView> {
    check_rank(op, strides)?;
    let mut view = KernelView {
        offset: offset as u64,
        strides: [0; MAX_RANK],
    };
    for (s, &stride) in view.strides.iter_mut().zip(strides) {
        *s = stride as u64;
    }
    Ok(view)
}

/// `(outer, size, inner)` of `dims` around `dim` (`dim == None`: the whole tensor as
/// one lane).
pub fn lanes(dims: &[usize], dim: Option<usize>) -> (u64, u64, u64) {
    let product = |d: &[usize]| d.iter().product::<usize>() as u64;
    match dim {
        Some(d) => (product(&dims[..d]), dims[d] as u64, product(&dims[d + 1..])),
        None => (1, product(dims), 1),
    }
}

/// The broadcast output dims of `lhs op rhs`, and the kernel's shape and operand views
/// (stride 0 along broadcast dims; strided operands are read where they lie).
pub fn binary_layout(
    name: &'static str,
    lhs: &Tensor,
    rhs: &Tensor,
) -> Result<(Vec<usize>, KernelShape, KernelView, KernelView)> {
    use crate::ops::elementwise::binary::{broadcast_dims, broadcast_strides};
    let out_dims = broadcast_dims(name, lhs.dims(), rhs.dims())?;
    let shape = kernel_shape(name, &out_dims)?;
    let lhs_view = kernel_view(
        name,
        lhs.storage_offset(),
        &broadcast_strides(lhs, &out_dims),
    )?;
    let rhs_view = kernel_view(
        name,
        rhs.storage_offset(),
        &broadcast_strides(rhs, &out_dims),
    )?;
    Ok((out_dims, shape, lhs_view, rhs_view))
}
