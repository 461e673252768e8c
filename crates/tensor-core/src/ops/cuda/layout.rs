//! Strided views on the device: gathering a view into a dense buffer (`contiguous`) and
//! scattering a dense buffer into a view (the write half of every in-place op).
//!
//! The kernels address elements by their width only (1, 2, 4 or 8 bytes), so one kernel
//! moves every dtype of that width; nothing is converted.

use cudarc::driver::PushKernelArg;

use crate::ops::kernel_layout::{kernel_shape, kernel_view};

use super::{dense_view, output_storage, storage_of, uninit, TensorKernel};
use crate::{Result, Tensor};

/// The layout kernel for elements of `bytes` bytes.
fn layout_kernel(direction: &str, bytes: usize) -> String {
    format!("ditto_{direction}_{}", bytes * 8)
}

/// A dense row-major copy of a CUDA view, made on the device.
pub(crate) fn contiguous(t: &Tensor) -> Result<Tensor> {
    const OP: &str = "contiguous";
    let (src, ordinal) = storage_of(t)?;
    let shape = kernel_shape(OP, t.dims())?;
    let view = kernel_view(OP, t.storage_offset(), t.strides())?;
    let mut out = uninit(t.dims(), t.dtype(), ordinal)?;
    let n = t.elem_count() as u64;
    if n == 0 {
        return Ok(out);
    }
    let name = layout_kernel("gather", t.dtype().size_in_bytes());
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
    // T* dst)`; every position the view forms lies inside `src` (it is a valid view of
    // that storage) and `dst` holds `n` elements of the same width.
    unsafe { kernel.launch(args) }?;
    Ok(out)
}

/// Writes the elements of `src` (same dims, dtype and device) into `dst`'s view,
/// leaving the rest of `dst`'s storage alone. `dst`'s storage is made unique first
/// (copy-on-write), like every in-place op.
pub(crate) fn write_into(dst: &mut Tensor, src: &Tensor) -> Result<()> {
    const OP: &str = "copy_from_";
    let src = super::dense(src)?;
    let shape = kernel_shape(OP, dst.dims())?;
    let view = kernel_view(OP, dst.storage_offset(), dst.strides())?;
    let n = dst.elem_count() as u64;
    if n == 0 {
        return Ok(());
    }
    let ordinal = storage_of(dst)?.1;
    if dst.is_contiguous() {
        // A dense stretch of `dst`'s buffer: a plain device-to-device copy, no kernel.
        let (start, src_start) = (dst.storage_offset(), src.storage_offset());
        let (from, _) = storage_of(&src)?;
        return output_storage(dst)?.copy_elements_from(start, from, src_start, n as usize);
    }
    let name = layout_kernel("scatter", dst.dtype().size_in_bytes());
    let kernel = TensorKernel::new(ordinal, name, n)?;
    let values = dense_view(&src)?;
    let target = output_storage(dst)?;
    let stream = target.stream()?;
    let mut args = kernel.args(&stream);
    args.arg(&n)
        .arg(&shape)
        .arg(&view)
        .arg(&values)
        .arg(target.bytes_mut());
    // SAFETY: matches `ditto_scatter_<bits>(u64 n, DittoShape, DittoView, const T* src,
    // T* dst)`; `values` holds the `n` dense elements of `src` and every position the
    // view forms lies inside `dst`'s storage.
    unsafe { kernel.launch(args) }?;
    Ok(())
}
