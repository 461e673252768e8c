//! `gather` and `one_hot` on the device: one kernel each, every output element written
//! by one thread from the dense i64 index (see [`crate::ops::class_index`]'s docs for why
//! index values are not checked here).

use cudarc::driver::PushKernelArg;

use crate::ops::cuda::uninit;
use crate::ops::cuda::{dense, dense_view, output_storage, storage_of, TensorKernel};
use crate::ops::elementwise::cuda::float_suffix;
use crate::ops::kernel_layout::{kernel_shape, kernel_view};
use crate::{DType, Result, Tensor};

/// `torch.gather(src, dim, index)`; the caller checked dims, dtypes and devices.
pub(crate) fn gather_index(src: &Tensor, dim: usize, index: &Tensor) -> Result<Tensor> {
    const OP: &str = "gather";
    let suffix = float_suffix(OP, src.dtype())?;
    let (storage, ordinal) = storage_of(src)?;
    let index = dense(index)?;
    let shape = kernel_shape(OP, index.dims())?;
    // The source's own view with `dim`'s stride zeroed: the kernel adds index * stride.
    let mut strides = src.strides().to_vec();
    let dim_stride = std::mem::replace(&mut strides[dim], 0) as u64;
    let view = kernel_view(OP, src.storage_offset(), &strides)?;
    let dim_size = src.dims()[dim] as u64;
    let mut out = uninit(index.dims(), src.dtype(), ordinal)?;
    let n = index.elem_count() as u64;
    if n == 0 {
        return Ok(out);
    }
    let name = format!("ditto_gather_index_{suffix}");
    let kernel = TensorKernel::new(ordinal, name, n)?;
    let picks = dense_view(&index)?;
    let stream = storage.stream()?;
    let dst = output_storage(&mut out)?;
    let mut args = kernel.args(&stream);
    args.arg(&n)
        .arg(&shape)
        .arg(&view)
        .arg(&dim_stride)
        .arg(&dim_size)
        .arg(&picks)
        .arg(storage.bytes())
        .arg(dst.bytes_mut());
    // SAFETY: matches `ditto_gather_index_<T>(u64 n, DittoShape, DittoView, u64
    // dim_stride, u64 dim_size, const i64* index, const T* src, T* out)`; `picks` holds
    // `n` dense i64s, `out` `n` elements, and every position read is a valid coordinate
    // of `src`'s view (index values outside `0..dim_size` read nothing).
    unsafe { kernel.launch(args) }?;
    Ok(out)
}

/// `one_hot(index, classes)` in `dtype`, shaped `dims` (the index's dims plus `classes`).
pub(crate) fn one_hot(index: &Tensor, dims: &[usize], dtype: DType) -> Result<Tensor> {
    const OP: &str = "one_hot";
    let suffix = float_suffix(OP, dtype)?;
    let index = dense(index)?;
    let ordinal = storage_of(&index)?.1;
    let classes = *dims.last().expect("one_hot adds the classes dimension") as u64;
    let mut out = uninit(dims, dtype, ordinal)?;
    let n = index.elem_count() as u64 * classes;
    if n == 0 {
        return Ok(out);
    }
    let name = format!("ditto_one_hot_{suffix}");
    let kernel = TensorKernel::new(ordinal, name, n)?;
    let picks = dense_view(&index)?;
    let stream = storage_of(&index)?.0.stream()?;
    let dst = output_storage(&mut out)?;
    let mut args = kernel.args(&stream);
    args.arg(&n).arg(&classes).arg(&picks).arg(dst.bytes_mut());
    // SAFETY: matches `ditto_one_hot_<T>(u64 n, u64 classes, const i64* index, T* out)`;
    // `picks` holds n / classes dense i64s and `out` n elements.
    unsafe { kernel.launch(args) }?;
    Ok(out)
}
