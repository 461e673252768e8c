//! Elementwise kernels: broadcasting arithmetic, maps of one tensor, `relu_backward`,
//! GELU (tanh approximation) and its gradient, and the optimiser's `axpy`; and the
//! float-kernel helpers the other families share (a scalar parameter of the tensor's
//! dtype, the kernel of a float op by name).

use cudarc::driver::{DeviceRepr, PushKernelArg};

use crate::ops::cuda::{dense, dense_view, output_storage, uninit, TensorKernel};
use crate::ops::cuda::{storage_of, write_into};
use crate::ops::elementwise::binary::BinOp as BinaryOp;
use crate::ops::elementwise::gelu::{GELU_BETA, GELU_KAPPA};
use crate::ops::elementwise::unary::UnaryOp;
use crate::ops::kernel_layout::binary_layout;
use crate::ops::Float;
use crate::Element;
use crate::{DType, Result, Tensor, TensorError};

/// The kernel name suffix for a float dtype, or `UnsupportedDType` (as on the CPU).
pub(crate) fn float_suffix(op: &'static str, dtype: DType) -> Result<&'static str> {
    match dtype {
        DType::F32 => Ok("f32"),
        DType::F64 => Ok("f64"),
        other => Err(TensorError::UnsupportedDType {
            op,
            dtype: other,
            supported: "f32, f64",
        }),
    }
}

/// `lhs op rhs`, broadcasting; both are CUDA tensors of one float dtype on one device
/// (the caller checked). Strided and broadcast operands are read in place.
pub(crate) fn binary(
    name: &'static str,
    op: BinaryOp,
    lhs: &Tensor,
    rhs: &Tensor,
) -> Result<Tensor> {
    let suffix = float_suffix(name, lhs.dtype())?;
    let (out_dims, shape, lhs_view, rhs_view) = binary_layout(name, lhs, rhs)?;
    let ((l, ordinal), (r, _)) = (storage_of(lhs)?, storage_of(rhs)?);
    let mut out = uninit(&out_dims, lhs.dtype(), ordinal)?;
    let n = out.elem_count() as u64;
    if n == 0 {
        return Ok(out);
    }
    let kernel_name = format!("ditto_binary_{suffix}");
    let kernel = TensorKernel::new(ordinal, kernel_name, n)?;
    let stream = l.stream()?;
    let code = op as i32;
    let dst = output_storage(&mut out)?;
    let mut args = kernel.args(&stream);
    args.arg(&n)
        .arg(&code)
        .arg(&shape)
        .arg(&lhs_view)
        .arg(&rhs_view)
        .arg(l.bytes())
        .arg(r.bytes())
        .arg(dst.bytes_mut());
    // SAFETY: matches `ditto_binary_<T>(u64 n, int op, DittoShape, DittoView, DittoView,
    // const T*, const T*, T*)`; both views (broadcast strides of valid views) stay inside
    // their storages, and `dst` holds the `n` output elements.
    unsafe { kernel.launch(args) }?;
    Ok(out)
}

/// `op` applied to every element of a CUDA float tensor; its scalars are rounded to the
/// tensor's dtype first, as on the CPU.
pub(crate) fn unary(name: &'static str, op: UnaryOp, t: &Tensor) -> Result<Tensor> {
    let (code, a, b) = op.kernel_args();
    match float_suffix(name, t.dtype())? {
        "f32" => unary_typed::<f32>(name, code, t, f32::from_f64(a), f32::from_f64(b)),
        _ => unary_typed::<f64>(name, code, t, a, b),
    }
}

fn unary_typed<T: Float + DeviceRepr>(
    name: &'static str,
    code: i32,
    t: &Tensor,
    a: T,
    b: T,
) -> Result<Tensor> {
    let suffix = float_suffix(name, t.dtype())?;
    let x = dense(t)?;
    let ordinal = storage_of(&x)?.1;
    let mut out = uninit(t.dims(), t.dtype(), ordinal)?;
    let n = out.elem_count() as u64;
    if n == 0 {
        return Ok(out);
    }
    let kernel_name = format!("ditto_unary_{suffix}");
    let kernel = TensorKernel::new(ordinal, kernel_name, n)?;
    let input = dense_view(&x)?;
    let dst = output_storage(&mut out)?;
    let stream = dst.stream()?;
    let mut args = kernel.args(&stream);
    args.arg(&n)
        .arg(&code)
        .arg(&a)
        .arg(&b)
        .arg(&input)
        .arg(dst.bytes_mut());
    // SAFETY: matches `ditto_unary_<T>(u64 n, int op, T a, T b, const T* x, T* out)` with
    // T the tensor's dtype (the caller binds `T` from it); `input` and `dst` each hold `n`
    // dense elements.
    unsafe { kernel.launch(args) }?;
    Ok(out)
}

/// `grad` where `input > 0`, else 0 (same dims, dtype and device; checked by the caller).
pub(crate) fn relu_backward(grad: &Tensor, input: &Tensor) -> Result<Tensor> {
    const OP: &str = "relu_backward";
    let suffix = float_suffix(OP, grad.dtype())?;
    let (g, x) = (dense(grad)?, dense(input)?);
    let ordinal = storage_of(&g)?.1;
    let mut out = uninit(grad.dims(), grad.dtype(), ordinal)?;
    let n = out.elem_count() as u64;
    if n == 0 {
        return Ok(out);
    }
    let kernel_name = format!("ditto_relu_backward_{suffix}");
    let kernel = TensorKernel::new(ordinal, kernel_name, n)?;
    let (g_view, x_view) = (dense_view(&g)?, dense_view(&x)?);
    let dst = output_storage(&mut out)?;
    let stream = dst.stream()?;
    let mut args = kernel.args(&stream);
    args.arg(&n).arg(&g_view).arg(&x_view).arg(dst.bytes_mut());
    // SAFETY: matches `ditto_relu_backward_<T>(u64 n, const T*, const T*, T*)`; all
    // three hold `n` dense elements of the same dtype.
    unsafe { kernel.launch(args) }?;
    Ok(out)
}

/// `s += alpha * x` in place (same dims, dtype and device; checked by the caller). A
/// contiguous `s` is updated where it lies; a strided one gets the result written back
/// into its view.
pub(crate) fn axpy_(s: &mut Tensor, alpha: f64, x: &Tensor) -> Result<()> {
    const OP: &str = "axpy_";
    if !s.is_contiguous() {
        let scaled = unary(OP, UnaryOp::MulScalar(alpha), x)?;
        let sum = binary(OP, BinaryOp::Add, s, &scaled)?;
        return write_into(s, &sum);
    }
    match float_suffix(OP, s.dtype())? {
        "f32" => axpy_dense::<f32>(s, f32::from_f64(alpha), x),
        _ => axpy_dense::<f64>(s, alpha, x),
    }
}

fn axpy_dense<T: Float + DeviceRepr>(s: &mut Tensor, alpha: T, x: &Tensor) -> Result<()> {
    const OP: &str = "axpy_";
    let suffix = float_suffix(OP, s.dtype())?;
    let x = dense(x)?;
    let n = s.elem_count() as u64;
    if n == 0 {
        return Ok(());
    }
    let ordinal = storage_of(s)?.1;
    let kernel_name = format!("ditto_axpy_{suffix}");
    let kernel = TensorKernel::new(ordinal, kernel_name, n)?;
    let x_view = dense_view(&x)?;
    let start = s.storage_offset() * s.dtype().size_in_bytes();
    let target = output_storage(s)?;
    let stream = target.stream()?;
    let mut s_view = target.bytes_mut().slice_mut(start..);
    let mut args = kernel.args(&stream);
    args.arg(&n).arg(&alpha).arg(&x_view).arg(&mut s_view);
    // SAFETY: matches `ditto_axpy_<T>(u64 n, T alpha, const T* x, T* s)`; `x_view` holds
    // `n` dense elements and `s_view` starts at `s`'s first element with `n` dense
    // elements after it (`s` is contiguous). `output_storage` made the storage unique, so
    // `x` (which holds its own reference) cannot alias it.
    unsafe { kernel.launch(args) }?;
    Ok(())
}

/// A scalar of the tensor's float dtype, as its kernel parameter (the f64 rounded once).
pub(crate) enum Scalar {
    F32(f32),
    F64(f64),
}

impl Scalar {
    pub(crate) fn of(dtype: DType, value: f64) -> Self {
        match dtype {
            DType::F32 => Scalar::F32(value as f32),
            _ => Scalar::F64(value),
        }
    }
}

/// Pushes a [`Scalar`] onto a kernel's argument list.
macro_rules! push_scalar {
    ($args:expr, $s:expr) => {
        match $s {
            Scalar::F32(v) => $args.arg(v),
            Scalar::F64(v) => $args.arg(v),
        }
    };
}

/// The kernel `ditto_<stem>_<dtype>` of `t`'s device, over `items` work items.
pub(crate) fn kernel_for(
    op: &'static str,
    stem: &str,
    t: &Tensor,
    items: u64,
) -> Result<TensorKernel> {
    let suffix = float_suffix(op, t.dtype())?;
    let ordinal = storage_of(t)?.1;
    TensorKernel::new(ordinal, format!("ditto_{stem}_{suffix}"), items)
}

/// [`kernel_for`] for a block-per-row kernel (`cuda/row_ops.cu`) over `rows` rows.
pub(crate) fn row_kernel_for(
    op: &'static str,
    stem: &str,
    t: &Tensor,
    rows: u64,
) -> Result<TensorKernel> {
    let suffix = float_suffix(op, t.dtype())?;
    let ordinal = storage_of(t)?.1;
    TensorKernel::per_row(ordinal, format!("ditto_{stem}_{suffix}"), rows)
}
pub(crate) use push_scalar;

/// `gelu_tanh(x)` (of `x + bias`, the bias repeated over the rows of its length, with
/// one), or with `grad` its gradient times `grad` (same dims, dtype, device, and the
/// bias `[last dim]`: the caller checked).
pub(crate) fn gelu_tanh(
    x: &Tensor,
    bias: Option<&Tensor>,
    grad: Option<&Tensor>,
    portable: bool,
) -> Result<Tensor> {
    let op = if grad.is_some() {
        "gelu_tanh_backward"
    } else {
        "gelu_tanh"
    };
    let x = dense(x)?;
    let ordinal = storage_of(&x)?.1;
    let mut out = uninit(x.dims(), x.dtype(), ordinal)?;
    let n = x.elem_count() as u64;
    if n == 0 {
        return Ok(out);
    }
    let kernel = kernel_for(op, op, &x, n)?;
    let (beta, kappa) = (
        Scalar::of(x.dtype(), GELU_BETA),
        Scalar::of(x.dtype(), GELU_KAPPA),
    );
    let portable = i32::from(portable);
    let grad = grad.map(dense).transpose()?;
    let grad_view = grad.as_ref().map(dense_view).transpose()?;
    let bias = bias.map(dense).transpose()?;
    let bias_view = bias.as_ref().map(dense_view).transpose()?;
    let c = bias.as_ref().map_or(1, |b| b.elem_count().max(1)) as u64;
    let null: u64 = 0;
    let x_view = dense_view(&x)?;
    let dst = output_storage(&mut out)?;
    let stream = dst.stream()?;
    let mut args = kernel.args(&stream);
    args.arg(&n);
    push_scalar!(args, &beta);
    push_scalar!(args, &kappa);
    args.arg(&portable);
    if let Some(g) = &grad_view {
        args.arg(g);
    }
    args.arg(&x_view);
    match &bias_view {
        Some(b) => args.arg(b),
        None => args.arg(&null),
    };
    args.arg(&c).arg(dst.bytes_mut());
    // SAFETY: matches `ditto_gelu_tanh_<T>(u64 n, T beta, T kappa, int portable, const T*
    // x, const T* bias, u64 c, T* out)` or `ditto_gelu_tanh_backward_<T>(..., int
    // portable, const T* grad, const T* x, const T* bias, u64 c, T* out)`; every buffer
    // is dense with `n` elements from its view's start, the bias `c` elements or NULL.
    unsafe { kernel.launch(args) }?;
    Ok(out)
}
