//! The `gather` / `one_hot` kernel bodies run on the host, with the arguments the CUDA
//! launchers build (the source's own view with `dim`'s stride zeroed, a dense index).
//! Unlike the CPU ops they take out-of-range index values, and give what a GPU gives
//! for them (NaN), so the tests can check that too.

use tensor_core::ops::kernel_layout::{kernel_shape, kernel_view, KernelShape, KernelView};
use tensor_core::{DType, Element, Result, Tensor, TensorError};

fn unsupported(dtype: DType) -> TensorError {
    TensorError::UnsupportedDType {
        op: "host_parity gather_index / one_hot",
        dtype,
        supported: "f32, f64",
    }
}

mod ffi {
    use super::{KernelShape, KernelView};

    macro_rules! host_index {
        ($t:ty, $gather:ident, $one_hot:ident) => {
            extern "C" {
                pub fn $gather(
                    n: u64,
                    shape: *const KernelShape,
                    view: *const KernelView,
                    dim_stride: u64,
                    dim_size: u64,
                    index: *const i64,
                    src: *const $t,
                    out: *mut $t,
                );
                pub fn $one_hot(n: u64, classes: u64, index: *const i64, out: *mut $t);
            }
        };
    }
    host_index!(f32, ditto_host_gather_index_f32, ditto_host_one_hot_f32);
    host_index!(f64, ditto_host_gather_index_f64, ditto_host_one_hot_f64);
}

/// `ditto_gather_index_element` for every element of `index` (i64, `x`'s rank, on the
/// CPU; shapes as `Tensor::gather` requires them, which this does not re-check).
pub fn gather_index(x: &Tensor, dim: usize, index: &Tensor) -> Result<Tensor> {
    x.check_dim("host_parity gather_index", dim)?;
    let picks = index.contiguous()?.to_vec::<i64>()?;
    let shape = kernel_shape("host_parity", index.dims())?;
    let mut strides = x.strides().to_vec();
    let dim_stride = std::mem::replace(&mut strides[dim], 0) as u64;
    let view = kernel_view("host_parity", x.storage_offset(), &strides)?;
    let (n, size) = (picks.len() as u64, x.dims()[dim] as u64);
    macro_rules! run {
        ($t:ty, $f:ident) => {{
            let src = <$t>::slice(x.cpu_storage()?).expect("dtype matched below");
            let mut out = vec![<$t>::default(); picks.len()];
            // SAFETY: `out` and `picks` hold n elements; every position read is a
            // coordinate of `x`'s view (a valid view of `src`) or nothing.
            let (p, s, o) = (picks.as_ptr(), src.as_ptr(), out.as_mut_ptr());
            unsafe { ffi::$f(n, &shape, &view, dim_stride, size, p, s, o) };
            Tensor::from_vec(out, index.dims(), tensor_core::Device::Cpu)
        }};
    }
    match x.dtype() {
        DType::F32 => run!(f32, ditto_host_gather_index_f32),
        DType::F64 => run!(f64, ditto_host_gather_index_f64),
        other => Err(unsupported(other)),
    }
}

/// `ditto_one_hot_element` for every element of the `(index.len(), classes)` output.
pub fn one_hot(index: &Tensor, classes: usize, dtype: DType) -> Result<Tensor> {
    let picks = index.contiguous()?.to_vec::<i64>()?;
    let mut dims = index.dims().to_vec();
    dims.push(classes);
    let n = (picks.len() * classes) as u64;
    macro_rules! run {
        ($t:ty, $f:ident) => {{
            let mut out = vec![<$t>::default(); picks.len() * classes];
            // SAFETY: `picks` holds n / classes i64s and `out` n elements.
            unsafe { ffi::$f(n, classes as u64, picks.as_ptr(), out.as_mut_ptr()) };
            Tensor::from_vec(out, &dims, tensor_core::Device::Cpu)
        }};
    }
    match dtype {
        DType::F32 => run!(f32, ditto_host_one_hot_f32),
        DType::F64 => run!(f64, ditto_host_one_hot_f64),
        other => Err(unsupported(other)),
    }
}
