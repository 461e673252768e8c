//! Strided views on the device: gathering a view into a dense buffer (`contiguous`),
//! scattering a dense buffer into a view (the write half of every in-place op, and
//! `cat`), and picking slices by index (`index_select`): no trip through the host.
//!
//! The kernels address elements by their width only (1, 2, 4 or 8 bytes), so one kernel
//! moves every dtype of that width; nothing is converted.

use cudarc::driver::PushKernelArg;

use crate::ops::kernel_layout::{kernel_shape, kernel_view};

use super::{dense, dense_view, output_storage, storage_of, uninit, upload_u64, TensorKernel};
use crate::cuda::CudaStorage;
use crate::{DType, Result, Tensor};

/// The layout kernel for elements of `bytes` bytes.
fn layout_kernel(direction: &str, bytes: usize) -> String {
    format!("ditto_{direction}_{}", bytes * 8)
}

/// A dense row-major copy of a CUDA view, made on the device.
pub(crate) fn contiguous(t: &Tensor) -> Result<Tensor> {
    let name = layout_kernel("gather", t.dtype().size_in_bytes());
    gather("contiguous", t, t.dtype(), name)
}

/// A dense row-major bf16 copy of an f32 CUDA view, each element rounded to nearest
/// even (`ditto_gather_f32_to_bf16`): what cuBLAS's bf16 GEMM reads under autocast.
pub(crate) fn to_bf16(t: &Tensor) -> Result<Tensor> {
    gather(
        "to_dtype",
        t,
        DType::BF16,
        "ditto_gather_f32_to_bf16".into(),
    )
}

/// A dense `dtype` tensor of `t`'s elements in row-major order, by the gather kernel
/// `name`, which reads `t`'s view and writes elements of `dtype`.
fn gather(op: &'static str, t: &Tensor, dtype: DType, name: String) -> Result<Tensor> {
    let (src, ordinal) = storage_of(t)?;
    let shape = kernel_shape(op, t.dims())?;
    let view = kernel_view(op, t.storage_offset(), t.strides())?;
    let mut out = uninit(t.dims(), dtype, ordinal)?;
    let n = t.elem_count() as u64;
    if n == 0 {
        return Ok(out);
    }
    let kernel = TensorKernel::new(ordinal, name, n)?;
    let stream = src.stream()?;
    let dst = output_storage(&mut out)?;
    let mut args = kernel.args(&stream);
    args.arg(&n)
        .arg(&shape)
        .arg(&view)
        .arg(src.bytes())
        .arg(dst.bytes_mut());
    // SAFETY: matches `ditto_gather_<bits>(u64 n, DittoShape, DittoView, const T* src,
    // T* dst)` and `ditto_gather_f32_to_bf16` (the same with float and unsigned short);
    // every position the view forms lies inside `src` (it is a valid view of that
    // storage) and `dst` holds `n` elements of `dtype`, the kernel's output type.
    unsafe { kernel.launch(args) }?;
    Ok(out)
}

/// Writes the elements of `src` (same dims, dtype and device) into `dst`'s view,
/// leaving the rest of `dst`'s storage alone. `dst`'s storage is made unique first
/// (copy-on-write), like every in-place op.
pub(crate) fn write_into(dst: &mut Tensor, src: &Tensor) -> Result<()> {
    const OP: &str = "copy_from_";
    let src = super::dense(src)?;
    let n = dst.elem_count();
    if n == 0 {
        return Ok(());
    }
    let ordinal = storage_of(dst)?.1;
    if dst.is_contiguous() {
        // A dense stretch of `dst`'s buffer: a plain device-to-device copy, no kernel.
        let (start, src_start) = (dst.storage_offset(), src.storage_offset());
        let (from, _) = storage_of(&src)?;
        return output_storage(dst)?.copy_elements_from(start, from, src_start, n);
    }
    let (dims, offset, strides) = (
        dst.dims().to_vec(),
        dst.storage_offset(),
        dst.strides().to_vec(),
    );
    let target = output_storage(dst)?;
    scatter(OP, target, ordinal, (&dims, offset, &strides), &src)
}

/// Writes the dense `src` into the view (`dims`, `offset`, `strides`) of `target`.
fn scatter(
    op: &'static str,
    target: &mut CudaStorage,
    ordinal: usize,
    (dims, offset, strides): (&[usize], usize, &[usize]),
    src: &Tensor,
) -> Result<()> {
    let shape = kernel_shape(op, dims)?;
    let view = kernel_view(op, offset, strides)?;
    let n = src.elem_count() as u64;
    let name = layout_kernel("scatter", src.dtype().size_in_bytes());
    let kernel = TensorKernel::new(ordinal, name, n)?;
    let values = dense_view(src)?;
    let stream = target.stream()?;
    let mut args = kernel.args(&stream);
    args.arg(&n)
        .arg(&shape)
        .arg(&view)
        .arg(&values)
        .arg(target.bytes_mut());
    // SAFETY: matches `ditto_scatter_<bits>(u64 n, DittoShape, DittoView, const T* src,
    // T* dst)`; `values` holds the `n` dense elements of `src` and every position the
    // view forms lies inside `target` (the callers' views are of that storage).
    unsafe { kernel.launch(args) }
}

/// `Tensor::cat` of CUDA tensors (checked: one dtype and device, dims that agree except
/// along `dim`), into a new dense tensor of `out_dims`: each input scattered into its
/// stretch of the output, one kernel per input.
pub(crate) fn cat(tensors: &[Tensor], dim: usize, out_dims: &[usize]) -> Result<Tensor> {
    const OP: &str = "cat";
    let ordinal = storage_of(&tensors[0])?.1;
    let mut out = uninit(out_dims, tensors[0].dtype(), ordinal)?;
    let strides = out.strides().to_vec();
    let inner: usize = out_dims[dim + 1..].iter().product();
    let target = output_storage(&mut out)?;
    let mut at = 0;
    for t in tensors {
        if t.elem_count() > 0 {
            let src = dense(t)?;
            scatter(OP, target, ordinal, (t.dims(), at * inner, &strides), &src)?;
        }
        at += t.dims()[dim];
    }
    Ok(out)
}

/// `Tensor::index_select` of a CUDA tensor (checked: `indices` lie inside dimension
/// `dim`), into a new dense tensor of `out_dims`: the indices are uploaded (one small
/// copy) and one kernel picks the slices.
pub(crate) fn index_select(
    t: &Tensor,
    dim: usize,
    indices: &[usize],
    out_dims: &[usize],
) -> Result<Tensor> {
    let ordinal = storage_of(t)?.1;
    let index = Tensor::from_storage(
        crate::Storage::Cuda(upload_u64(ordinal, indices)?),
        &[indices.len()],
    )?;
    index_select_from(t, dim, &index, out_dims)
}

/// [`index_select`] with the indices already on `t`'s device: `index` is a dense I64
/// tensor of values checked `< t.dims()[dim]` (by the caller, on the host).
pub(crate) fn index_select_from(
    t: &Tensor,
    dim: usize,
    index: &Tensor,
    out_dims: &[usize],
) -> Result<Tensor> {
    let src = dense(t)?;
    let ordinal = storage_of(&src)?.1;
    let mut out = uninit(out_dims, t.dtype(), ordinal)?;
    let n = out.elem_count() as u64;
    if n == 0 {
        return Ok(out);
    }
    let size = t.dims()[dim] as u64;
    let inner = t.dims()[dim + 1..].iter().product::<usize>() as u64;
    let count = index.elem_count() as u64;
    let name = layout_kernel("index_select", t.dtype().size_in_bytes());
    let kernel = TensorKernel::new(ordinal, name, n)?;
    let index = dense(index)?;
    let index_view = dense_view(&index)?;
    let values = dense_view(&src)?;
    let dst = output_storage(&mut out)?;
    let stream = dst.stream()?;
    let mut args = kernel.args(&stream);
    args.arg(&n)
        .arg(&size)
        .arg(&inner)
        .arg(&count)
        .arg(&index_view)
        .arg(&values)
        .arg(dst.bytes_mut());
    // SAFETY: matches `ditto_index_select_<bits>(u64 n, u64 size, u64 inner, u64 count,
    // const u64* index, const T* src, T* dst)`; `index` holds `count` checked indices
    // below `size`, `src` is the dense [outer, size, inner] input and `dst` holds the
    // `n = outer * count * inner` outputs.
    unsafe { kernel.launch(args) }?;
    Ok(out)
}
