//! The CUDA tensor-op kernel bodies, compiled for the host, as functions on CPU tensors
//! (feature `host-parity`).
//!
//! `host/tensor_ops_shim.cpp` includes `cuda/tensor_ops.cuh` with the host shim and runs
//! each kernel's loop over all its work items, calling the same `__host__ __device__`
//! function the GPU calls. The functions here hand it the same arguments the CUDA
//! launchers do (the same [`kernel_layout`](tensor_core::ops::kernel_layout) code builds
//! them), so the parity tests (`tests/integration/cuda_tensor_ops_parity.rs` in the `ditto` crate)
//! check the GPU code against the CPU ops on machines without a GPU.
//!
//! Ops are named as the [`Tensor`] methods they mirror (`"add"`, `"relu"`, ...); an
//! unknown name is an `InvalidArgument` error.

/// Runs `$body` with `$t` bound to `f32` or `f64`, the dtypes the kernels take; any other
/// dtype is tensor-core's `UnsupportedDType` error.
macro_rules! with_float_dtype {
    ($dtype:expr, $op:expr, $t:ident => $body:expr) => {
        match $dtype {
            tensor_core::DType::F32 => {
                type $t = f32;
                $body
            }
            tensor_core::DType::F64 => {
                type $t = f64;
                $body
            }
            dtype => {
                return Err(tensor_core::TensorError::UnsupportedDType {
                    op: $op,
                    dtype,
                    supported: "f32, f64",
                })
            }
        }
    };
}

mod accumulate;
mod class_index;
mod fused_sgd;
mod portable_tanh;

pub use accumulate::{index_add, scatter_add, sum_atomic, Body};
pub use class_index::{gather_index, one_hot};
pub use fused_sgd::sgd_momentum_step;
pub use portable_tanh::portable_tanh;

use tensor_core::ops::elementwise::binary::BinOp;
use tensor_core::ops::elementwise::unary::UnaryOp;
use tensor_core::ops::kernel_layout::{binary_layout, kernel_shape, kernel_view, lanes};
use tensor_core::ops::kernel_layout::{KernelShape, KernelView};
use tensor_core::ops::reduce::reduced_dims;
use tensor_core::ops::Float;
use tensor_core::{CpuStorage, DType, Element, Result, Tensor, TensorError};

mod ffi {
    use super::{KernelShape, KernelView};

    macro_rules! host_ops {
        ($t:ty, $binary:ident, $unary:ident, $relu_bw:ident, $axpy:ident, $sum:ident, $max:ident, $log_softmax:ident, $log_softmax_portable:ident) => {
            extern "C" {
                pub fn $binary(
                    n: u64,
                    op: i32,
                    shape: *const KernelShape,
                    lhs_view: *const KernelView,
                    rhs_view: *const KernelView,
                    lhs: *const $t,
                    rhs: *const $t,
                    out: *mut $t,
                );
                pub fn $unary(n: u64, op: i32, a: $t, b: $t, x: *const $t, out: *mut $t);
                pub fn $relu_bw(n: u64, grad: *const $t, input: *const $t, out: *mut $t);
                pub fn $axpy(n: u64, alpha: $t, x: *const $t, s: *mut $t);
                pub fn $sum(
                    outer: u64,
                    size: u64,
                    inner: u64,
                    mean: i32,
                    x: *const $t,
                    out: *mut $t,
                );
                pub fn $max(
                    outer: u64,
                    size: u64,
                    inner: u64,
                    x: *const $t,
                    values: *mut $t,
                    indices: *mut i64,
                );
                pub fn $log_softmax(outer: u64, size: u64, inner: u64, x: *const $t, out: *mut $t);
                pub fn $log_softmax_portable(
                    outer: u64,
                    size: u64,
                    inner: u64,
                    x: *const $t,
                    out: *mut $t,
                );
            }
        };
    }
    host_ops!(
        f32,
        ditto_host_binary_f32,
        ditto_host_unary_f32,
        ditto_host_relu_backward_f32,
        ditto_host_axpy_f32,
        ditto_host_sum_f32,
        ditto_host_max_dim_f32,
        ditto_host_log_softmax_f32,
        ditto_host_log_softmax_portable_f32
    );
    host_ops!(
        f64,
        ditto_host_binary_f64,
        ditto_host_unary_f64,
        ditto_host_relu_backward_f64,
        ditto_host_axpy_f64,
        ditto_host_sum_f64,
        ditto_host_max_dim_f64,
        ditto_host_log_softmax_f64,
        ditto_host_log_softmax_portable_f64
    );
    extern "C" {
        pub fn ditto_host_gather_32(
            n: u64,
            shape: *const KernelShape,
            view: *const KernelView,
            src: *const u32,
            dst: *mut u32,
        );
    }
}

/// The C entry points for one float type.
trait HostOps: Float {
    const BINARY: unsafe extern "C" fn(
        u64,
        i32,
        *const KernelShape,
        *const KernelView,
        *const KernelView,
        *const Self,
        *const Self,
        *mut Self,
    );
    const UNARY: unsafe extern "C" fn(u64, i32, Self, Self, *const Self, *mut Self);
    const RELU_BACKWARD: unsafe extern "C" fn(u64, *const Self, *const Self, *mut Self);
    const AXPY: unsafe extern "C" fn(u64, Self, *const Self, *mut Self);
    const SUM: unsafe extern "C" fn(u64, u64, u64, i32, *const Self, *mut Self);
    const MAX_DIM: unsafe extern "C" fn(u64, u64, u64, *const Self, *mut Self, *mut i64);
    const LOG_SOFTMAX: unsafe extern "C" fn(u64, u64, u64, *const Self, *mut Self);
    const LOG_SOFTMAX_PORTABLE: unsafe extern "C" fn(u64, u64, u64, *const Self, *mut Self);
}

impl HostOps for f32 {
    const BINARY: unsafe extern "C" fn(
        u64,
        i32,
        *const KernelShape,
        *const KernelView,
        *const KernelView,
        *const f32,
        *const f32,
        *mut f32,
    ) = ffi::ditto_host_binary_f32;
    const UNARY: unsafe extern "C" fn(u64, i32, f32, f32, *const f32, *mut f32) =
        ffi::ditto_host_unary_f32;
    const RELU_BACKWARD: unsafe extern "C" fn(u64, *const f32, *const f32, *mut f32) =
        ffi::ditto_host_relu_backward_f32;
    const AXPY: unsafe extern "C" fn(u64, f32, *const f32, *mut f32) = ffi::ditto_host_axpy_f32;
    const SUM: unsafe extern "C" fn(u64, u64, u64, i32, *const f32, *mut f32) =
        ffi::ditto_host_sum_f32;
    const MAX_DIM: unsafe extern "C" fn(u64, u64, u64, *const f32, *mut f32, *mut i64) =
        ffi::ditto_host_max_dim_f32;
    const LOG_SOFTMAX: unsafe extern "C" fn(u64, u64, u64, *const f32, *mut f32) =
        ffi::ditto_host_log_softmax_f32;
    const LOG_SOFTMAX_PORTABLE: unsafe extern "C" fn(u64, u64, u64, *const f32, *mut f32) =
        ffi::ditto_host_log_softmax_portable_f32;
}

impl HostOps for f64 {
    const BINARY: unsafe extern "C" fn(
        u64,
        i32,
        *const KernelShape,
        *const KernelView,
        *const KernelView,
        *const f64,
        *const f64,
        *mut f64,
    ) = ffi::ditto_host_binary_f64;
    const UNARY: unsafe extern "C" fn(u64, i32, f64, f64, *const f64, *mut f64) =
        ffi::ditto_host_unary_f64;
    const RELU_BACKWARD: unsafe extern "C" fn(u64, *const f64, *const f64, *mut f64) =
        ffi::ditto_host_relu_backward_f64;
    const AXPY: unsafe extern "C" fn(u64, f64, *const f64, *mut f64) = ffi::ditto_host_axpy_f64;
    const SUM: unsafe extern "C" fn(u64, u64, u64, i32, *const f64, *mut f64) =
        ffi::ditto_host_sum_f64;
    const MAX_DIM: unsafe extern "C" fn(u64, u64, u64, *const f64, *mut f64, *mut i64) =
        ffi::ditto_host_max_dim_f64;
    const LOG_SOFTMAX: unsafe extern "C" fn(u64, u64, u64, *const f64, *mut f64) =
        ffi::ditto_host_log_softmax_f64;
    const LOG_SOFTMAX_PORTABLE: unsafe extern "C" fn(u64, u64, u64, *const f64, *mut f64) =
        ffi::ditto_host_log_softmax_portable_f64;
}

fn unknown(op: &str) -> TensorError {
    TensorError::InvalidArgument {
        op: "host_parity",
        message: format!("no kernel body for op {op:?}"),
    }
}

/// The whole storage of a CPU float tensor (views index into it).
fn storage_slice<T: Float>(t: &Tensor) -> Result<&[T]> {
    t.check_dtype::<T>("host_parity")?;
    Ok(T::slice(t.cpu_storage()?).expect("dtype checked"))
}

/// A dense copy's elements, as the CUDA launchers' `dense` gives them to a kernel.
fn dense_values<T: Float>(t: &Tensor) -> Result<Vec<T>> {
    t.to_vec::<T>()
}

fn tensor<T: Element>(values: Vec<T>, dims: &[usize]) -> Result<Tensor> {
    Tensor::from_cpu_storage(T::into_storage(values), dims)
}

/// `ditto_binary_element` over every output element: `lhs op rhs`, broadcasting, with
/// strided operands read where they lie.
pub fn binary(op: &str, lhs: &Tensor, rhs: &Tensor) -> Result<Tensor> {
    let code = match op {
        "add" => BinOp::Add,
        "sub" => BinOp::Sub,
        "mul" => BinOp::Mul,
        "div" => BinOp::Div,
        _ => return Err(unknown(op)),
    };
    lhs.require_compatible("host_parity", rhs)?;
    with_float_dtype!(lhs.dtype(), "host_parity", T => binary_typed::<T>(code, lhs, rhs))
}

fn binary_typed<T: HostOps>(op: BinOp, lhs: &Tensor, rhs: &Tensor) -> Result<Tensor> {
    let (dims, shape, lhs_view, rhs_view) = binary_layout("host_parity", lhs, rhs)?;
    let n: usize = dims.iter().product();
    let mut out = vec![T::default(); n];
    let (l, r) = (storage_slice::<T>(lhs)?, storage_slice::<T>(rhs)?);
    // SAFETY: the views come from valid views of `l` / `r` (every position they form is
    // inside), `out` holds the n output elements, and the structs match the C layout.
    unsafe {
        T::BINARY(
            n as u64,
            op as i32,
            &shape,
            &lhs_view,
            &rhs_view,
            l.as_ptr(),
            r.as_ptr(),
            out.as_mut_ptr(),
        )
    };
    tensor(out, &dims)
}

/// `ditto_unary_op` over every element, with the scalars rounded to the dtype first.
pub fn unary(op: &str, x: &Tensor, a: f64, b: f64) -> Result<Tensor> {
    let op = match op {
        "relu" => UnaryOp::Relu,
        "exp" => UnaryOp::Exp,
        "log" => UnaryOp::Log,
        "sqrt" => UnaryOp::Sqrt,
        "powf" => UnaryOp::Pow(a),
        "neg" => UnaryOp::Neg,
        "affine" => UnaryOp::Affine { mul: a, add: b },
        "mul_scalar" => UnaryOp::MulScalar(a),
        "add_scalar" => UnaryOp::AddScalar(a),
        "portable_exp" => UnaryOp::PortableExp,
        "portable_log" => UnaryOp::PortableLog,
        "round_to_bf16" => UnaryOp::RoundToBf16,
        _ => return Err(unknown(op)),
    };
    let (code, a, b) = op.kernel_args();
    with_float_dtype!(x.dtype(), "host_parity", T => {
        let values = dense_values::<T>(x)?;
        let mut out = vec![T::default(); values.len()];
        // SAFETY: `values` and `out` each hold the n elements the loop touches.
        unsafe {
            T::UNARY(values.len() as u64, code, T::from_f64(a), T::from_f64(b), values.as_ptr(), out.as_mut_ptr())
        };
        tensor(out, x.dims())
    })
}

/// `ditto_relu_backward_op` over every element (same dims and dtype).
pub fn relu_backward(grad: &Tensor, input: &Tensor) -> Result<Tensor> {
    grad.require_compatible("host_parity", input)?;
    grad.require_same_dims("host_parity", input)?;
    with_float_dtype!(grad.dtype(), "host_parity", T => {
        let (g, x) = (dense_values::<T>(grad)?, dense_values::<T>(input)?);
        let mut out = vec![T::default(); g.len()];
        // SAFETY: all three buffers hold the same n elements.
        unsafe { T::RELU_BACKWARD(g.len() as u64, g.as_ptr(), x.as_ptr(), out.as_mut_ptr()) };
        tensor(out, grad.dims())
    })
}

/// `ditto_axpy_op` over every element: `s + alpha * x` (alpha rounded to the dtype), as
/// a new tensor.
pub fn axpy(s: &Tensor, alpha: f64, x: &Tensor) -> Result<Tensor> {
    s.require_compatible("host_parity", x)?;
    s.require_same_dims("host_parity", x)?;
    with_float_dtype!(s.dtype(), "host_parity", T => {
        let (mut out, xs) = (dense_values::<T>(s)?, dense_values::<T>(x)?);
        // SAFETY: `xs` and `out` hold the same n elements.
        unsafe { T::AXPY(out.len() as u64, T::from_f64(alpha), xs.as_ptr(), out.as_mut_ptr()) };
        tensor(out, s.dims())
    })
}

/// Both phases of a sum (or mean) along `dim`, or over everything for `None`.
pub fn sum_dim(x: &Tensor, dim: Option<usize>, mean: bool) -> Result<Tensor> {
    if let Some(d) = dim {
        x.check_dim("host_parity", d)?;
    }
    let (outer, size, inner) = lanes(x.dims(), dim);
    let dims = dim.map_or_else(Vec::new, |d| reduced_dims(x.dims(), d, false));
    with_float_dtype!(x.dtype(), "host_parity", T => {
        let values = dense_values::<T>(x)?;
        let mut out = vec![T::default(); (outer * inner) as usize];
        // SAFETY: `values` holds outer*size*inner dense elements, `out` outer*inner.
        unsafe { T::SUM(outer, size, inner, i32::from(mean), values.as_ptr(), out.as_mut_ptr()) };
        tensor(out, &dims)
    })
}

/// `ditto_max_lane` for every lane along `dim`: the maxima and their indices.
pub fn max_dim(x: &Tensor, dim: usize) -> Result<(Tensor, Tensor)> {
    tensor_core::ops::reduce::check_nonempty(x, "host_parity", dim)?;
    let (outer, size, inner) = lanes(x.dims(), Some(dim));
    let dims = reduced_dims(x.dims(), dim, false);
    with_float_dtype!(x.dtype(), "host_parity", T => {
        let values = dense_values::<T>(x)?;
        let lanes = (outer * inner) as usize;
        let (mut maxima, mut indices) = (vec![T::default(); lanes], vec![0i64; lanes]);
        // SAFETY: size >= 1 (checked), `values` holds outer*size*inner dense elements and
        // both outputs outer*inner.
        unsafe { T::MAX_DIM(outer, size, inner, values.as_ptr(), maxima.as_mut_ptr(), indices.as_mut_ptr()) };
        Ok((tensor(maxima, &dims)?, tensor(indices, &dims)?))
    })
}

/// `ditto_log_softmax_lane` for every lane along `dim`.
pub fn log_softmax(x: &Tensor, dim: usize) -> Result<Tensor> {
    log_softmax_with(x, dim, false)
}

/// `ditto_log_softmax_lane` with `portable` (the `ditto_log_softmax_portable_*` kernels
/// of portable arithmetic, docs/contract.md §14) for every lane along `dim`.
pub fn log_softmax_with(x: &Tensor, dim: usize, portable: bool) -> Result<Tensor> {
    x.check_dim("host_parity", dim)?;
    let (outer, size, inner) = lanes(x.dims(), Some(dim));
    with_float_dtype!(x.dtype(), "host_parity", T => {
        let values = dense_values::<T>(x)?;
        let mut out = vec![T::default(); values.len()];
        if size > 0 {
            // SAFETY: size >= 1; `values` and `out` hold outer*size*inner elements.
            let run = if portable { T::LOG_SOFTMAX_PORTABLE } else { T::LOG_SOFTMAX };
            unsafe { run(outer, size, inner, values.as_ptr(), out.as_mut_ptr()) };
        }
        tensor(out, x.dims())
    })
}

/// The gather kernel's body on a 4-byte tensor's view: its elements in row-major order,
/// read through the view's shape, strides and offset.
pub fn gather(x: &Tensor) -> Result<Tensor> {
    if x.dtype().size_in_bytes() != 4 {
        return Err(TensorError::UnsupportedDType {
            op: "host_parity gather",
            dtype: x.dtype(),
            supported: "f32, u32",
        });
    }
    let shape = kernel_shape("host_parity", x.dims())?;
    let view = kernel_view("host_parity", x.storage_offset(), x.strides())?;
    let words: &[u32] = match x.cpu_storage()? {
        CpuStorage::F32(v) => bytemuck::cast_slice(v),
        CpuStorage::U32(v) => v,
        _ => unreachable!("4-byte dtypes are f32 and u32"),
    };
    let n = x.elem_count();
    let mut out = vec![0u32; n];
    // SAFETY: every position the view forms is inside `words` (a valid view of that
    // storage) and `out` holds the n elements.
    unsafe { ffi::ditto_host_gather_32(n as u64, &shape, &view, words.as_ptr(), out.as_mut_ptr()) };
    let out = match x.dtype() {
        DType::F32 => CpuStorage::F32(bytemuck::cast_slice(&out).to_vec()),
        _ => CpuStorage::U32(out),
    };
    Tensor::from_cpu_storage(out, x.dims())
}
