//! The transformer ops on CUDA tensors: GELU (tanh approximation) and its gradient, layer
//! norm and its backward, the causal softmax of attention and its backward, and one
//! AdamW step. Their kernels are in `cuda/tensor_ops.cu`, their bodies in
//! `cuda/transformer_ops.cuh`, each following its CPU op's documented order of
//! operations; the batched matmul is in `batched_matmul.rs`.
//!
//! Every output element (or row, or column) belongs to one thread, and every sum runs
//! inside one thread in the contract's order: the layer norm's weight and bias gradients
//! are one thread per column walking the rows in order, never atomics. So these ops have
//! only a deterministic path, and under portable arithmetic (f32, docs/contract.md §14)
//! they give the CPU's bits; otherwise `exp` / `tanh` are libdevice's.

use cudarc::driver::{DeviceRepr, PushKernelArg};

use super::elementwise::float_suffix;
use super::{dense, dense_view, output_storage, storage_of, uninit, TensorKernel};
use crate::ops::adamw::AdamWScalars;
use crate::ops::gelu::{GELU_BETA, GELU_KAPPA};
use crate::ops::AdamWStep;
use crate::{DType, Element, Result, Tensor};

/// A scalar of the tensor's float dtype, as its kernel parameter (the f64 rounded once).
enum Scalar {
    F32(f32),
    F64(f64),
}

impl Scalar {
    fn of(dtype: DType, value: f64) -> Self {
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
fn kernel_for(op: &'static str, stem: &str, t: &Tensor, items: u64) -> Result<TensorKernel> {
    let suffix = float_suffix(op, t.dtype())?;
    let ordinal = storage_of(t)?.1;
    TensorKernel::new(ordinal, format!("ditto_{stem}_{suffix}"), items)
}

/// `gelu_tanh(x)`, or with `grad` its gradient times `grad` (same dims, dtype, device:
/// the caller checked).
pub(crate) fn gelu_tanh(x: &Tensor, grad: Option<&Tensor>, portable: bool) -> Result<Tensor> {
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
    args.arg(&x_view).arg(dst.bytes_mut());
    // SAFETY: matches `ditto_gelu_tanh_<T>(u64 n, T beta, T kappa, int portable, const T*
    // x, T* out)` or `ditto_gelu_tanh_backward_<T>(..., int portable, const T* grad, const
    // T* x, T* out)`; every buffer is dense with `n` elements from its view's start.
    unsafe { kernel.launch(args) }?;
    Ok(out)
}

/// `(rows, c)` of a `[..., c]` tensor (the caller checked `c > 0`).
fn rows_and_width(x: &Tensor) -> (u64, u64) {
    let c = x.dims().last().copied().unwrap_or(1).max(1);
    ((x.elem_count() / c) as u64, c as u64)
}

/// `x`'s dims with the last one 1: the dims of `mean` and `rstd`.
fn stats_dims(x: &Tensor) -> Vec<usize> {
    let mut dims = x.dims().to_vec();
    if let Some(last) = dims.last_mut() {
        *last = 1;
    }
    dims
}

/// Layer norm over the last dimension: `(output, mean, rstd)`. Shapes, dtypes, devices
/// and `eps` were checked by the caller.
pub(crate) fn layer_norm(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<(Tensor, Tensor, Tensor)> {
    const OP: &str = "layer_norm";
    let x = dense(x)?;
    let ordinal = storage_of(&x)?.1;
    let (rows, c) = rows_and_width(&x);
    let stats = stats_dims(&x);
    let mut out = uninit(x.dims(), x.dtype(), ordinal)?;
    let mut mean = uninit(&stats, x.dtype(), ordinal)?;
    let mut rstd = uninit(&stats, x.dtype(), ordinal)?;
    if rows == 0 {
        return Ok((out, mean, rstd));
    }
    let kernel = kernel_for(OP, OP, &x, rows)?;
    let (weight, bias) = (weight.map(dense).transpose()?, bias.map(dense).transpose()?);
    let (w_view, b_view) = (
        weight.as_ref().map(dense_view).transpose()?,
        bias.as_ref().map(dense_view).transpose()?,
    );
    let x_view = dense_view(&x)?;
    let stream = storage_of(&x)?.0.stream()?;
    let null: u64 = 0;
    let out_dst = output_storage(&mut out)?;
    let mean_dst = output_storage(&mut mean)?;
    let rstd_dst = output_storage(&mut rstd)?;
    let mut args = kernel.args(&stream);
    args.arg(&rows).arg(&c).arg(&eps).arg(&x_view);
    match &w_view {
        Some(w) => args.arg(w),
        None => args.arg(&null),
    };
    match &b_view {
        Some(b) => args.arg(b),
        None => args.arg(&null),
    };
    args.arg(out_dst.bytes_mut())
        .arg(mean_dst.bytes_mut())
        .arg(rstd_dst.bytes_mut());
    // SAFETY: matches `ditto_layer_norm_<T>(u64 rows, u64 c, double eps, const T* x,
    // const T* w, const T* b, T* out, T* mean, T* rstd)`: x and out hold rows * c dense
    // elements, w and b c elements or NULL (absent), mean and rstd `rows` elements.
    unsafe { kernel.launch(args) }?;
    Ok((out, mean, rstd))
}

/// The gradients of layer norm: `(input, weight, bias)`; the caller checked every shape.
pub(crate) fn layer_norm_backward(
    grad: &Tensor,
    x: &Tensor,
    mean: &Tensor,
    rstd: &Tensor,
    weight: Option<&Tensor>,
) -> Result<(Tensor, Tensor, Tensor)> {
    const OP: &str = "layer_norm_backward";
    let (dy, x, mean, rstd) = (dense(grad)?, dense(x)?, dense(mean)?, dense(rstd)?);
    let weight = weight.map(dense).transpose()?;
    let ordinal = storage_of(&x)?.1;
    let (rows, c) = rows_and_width(&x);
    let width = c as usize;
    let mut dx = uninit(x.dims(), x.dtype(), ordinal)?;
    // Zeroed: with no rows the parameter gradients are empty sums.
    let mut dw = super::empty(&[width], x.dtype(), ordinal)?;
    let mut db = super::empty(&[width], x.dtype(), ordinal)?;
    if rows == 0 {
        return Ok((dx, dw, db));
    }
    let views = [&dy, &x, &mean, &rstd].map(dense_view);
    let [dy_view, x_view, mean_view, rstd_view] = views;
    let (dy_view, x_view) = (dy_view?, x_view?);
    let (mean_view, rstd_view) = (mean_view?, rstd_view?);
    let w_view = weight.as_ref().map(dense_view).transpose()?;
    let stream = storage_of(&x)?.0.stream()?;
    let null: u64 = 0;

    let rows_kernel = kernel_for(OP, "layer_norm_backward", &x, rows)?;
    let dx_dst = output_storage(&mut dx)?;
    let mut args = rows_kernel.args(&stream);
    args.arg(&rows)
        .arg(&c)
        .arg(&dy_view)
        .arg(&x_view)
        .arg(&mean_view)
        .arg(&rstd_view);
    match &w_view {
        Some(w) => args.arg(w),
        None => args.arg(&null),
    };
    args.arg(dx_dst.bytes_mut());
    // SAFETY: matches `ditto_layer_norm_backward_<T>(u64 rows, u64 c, const T* dy, const
    // T* x, const T* mean, const T* rstd, const T* w, T* dx)`: dy, x, dx hold rows * c
    // dense elements, mean and rstd `rows`, w `c` or NULL.
    unsafe { rows_kernel.launch(args) }?;

    let columns_kernel = kernel_for(OP, "layer_norm_param_grads", &x, c)?;
    let dw_dst = output_storage(&mut dw)?;
    let db_dst = output_storage(&mut db)?;
    let mut args = columns_kernel.args(&stream);
    args.arg(&rows)
        .arg(&c)
        .arg(&dy_view)
        .arg(&x_view)
        .arg(&mean_view)
        .arg(&rstd_view)
        .arg(dw_dst.bytes_mut())
        .arg(db_dst.bytes_mut());
    // SAFETY: matches `ditto_layer_norm_param_grads_<T>(u64 rows, u64 c, const T* dy,
    // const T* x, const T* mean, const T* rstd, T* dw, T* db)`, sizes as above; dw and db
    // hold `c` elements.
    unsafe { columns_kernel.launch(args) }?;
    Ok((dx, dw, db))
}

/// `(rows, t)` of attention scores `[..., t, t]` (the caller checked the last two dims
/// are equal); `None` when empty.
fn score_rows(x: &Tensor) -> Option<(u64, u64)> {
    let t = x.dims().last().copied().unwrap_or(0);
    (t > 0 && x.elem_count() > 0).then(|| ((x.elem_count() / t) as u64, t as u64))
}

/// The causal softmax of `x * scale` along the last dimension (ops/causal_softmax.rs).
pub(crate) fn causal_softmax(x: &Tensor, scale: f64, portable: bool) -> Result<Tensor> {
    const OP: &str = "causal_softmax";
    let x = dense(x)?;
    let ordinal = storage_of(&x)?.1;
    let mut out = uninit(x.dims(), x.dtype(), ordinal)?;
    let Some((rows, t)) = score_rows(&x) else {
        return Ok(out);
    };
    let kernel = kernel_for(OP, OP, &x, rows)?;
    let scale = Scalar::of(x.dtype(), scale);
    let portable = i32::from(portable);
    let x_view = dense_view(&x)?;
    let dst = output_storage(&mut out)?;
    let stream = dst.stream()?;
    let mut args = kernel.args(&stream);
    args.arg(&rows).arg(&t);
    push_scalar!(args, &scale);
    args.arg(&portable).arg(&x_view).arg(dst.bytes_mut());
    // SAFETY: matches `ditto_causal_softmax_<T>(u64 rows, u64 t, T scale, int portable,
    // const T* x, T* out)`: both hold rows * t dense elements.
    unsafe { kernel.launch(args) }?;
    Ok(out)
}

/// The gradient of the causal softmax with respect to its unscaled scores.
pub(crate) fn causal_softmax_backward(grad: &Tensor, probs: &Tensor, scale: f64) -> Result<Tensor> {
    const OP: &str = "causal_softmax_backward";
    let (dp, p) = (dense(grad)?, dense(probs)?);
    let ordinal = storage_of(&p)?.1;
    let mut out = uninit(p.dims(), p.dtype(), ordinal)?;
    let Some((rows, t)) = score_rows(&p) else {
        return Ok(out);
    };
    let kernel = kernel_for(OP, OP, &p, rows)?;
    // The scale rounded to the dtype first, then used in f64 (as on the CPU).
    let scale = match p.dtype() {
        DType::F32 => f64::from(scale as f32),
        _ => scale,
    };
    let (dp_view, p_view) = (dense_view(&dp)?, dense_view(&p)?);
    let dst = output_storage(&mut out)?;
    let stream = dst.stream()?;
    let mut args = kernel.args(&stream);
    args.arg(&rows)
        .arg(&t)
        .arg(&scale)
        .arg(&dp_view)
        .arg(&p_view)
        .arg(dst.bytes_mut());
    // SAFETY: matches `ditto_causal_softmax_backward_<T>(u64 rows, u64 t, double scale,
    // const T* dp, const T* p, T* dx)`: all hold rows * t dense elements.
    unsafe { kernel.launch(args) }?;
    Ok(out)
}

/// `DittoAdamW<T>` in `cuda/transformer_ops.cuh`: the step's scalars, field for field.
#[repr(C)]
#[derive(Clone, Copy)]
struct KernelAdamW<T> {
    decay_factor: T,
    lerp_weight: T,
    beta2: T,
    one_minus_beta2: T,
    correction2_sqrt: T,
    eps: T,
    neg_step_size: T,
    decay: i32,
    lerp_low: i32,
}

// SAFETY: a `repr(C)` struct of seven `T` (f32 or f64) then two `i32`, the field order,
// sizes and alignment of `DittoAdamW<T>`.
unsafe impl<T: DeviceRepr> DeviceRepr for KernelAdamW<T> {}

/// One AdamW step in place; all four are contiguous CUDA tensors of one float dtype,
/// device and shape, and the hyper-parameters are valid (the caller checked).
pub(crate) fn adamw_step_(
    value: &mut Tensor,
    m: &mut Tensor,
    v: &mut Tensor,
    grad: &Tensor,
    hyper: &AdamWStep,
) -> Result<()> {
    match value.dtype() {
        DType::F32 => adamw::<f32>(value, m, v, grad, hyper),
        _ => adamw::<f64>(value, m, v, grad, hyper),
    }
}

fn adamw<T: Element + DeviceRepr>(
    value: &mut Tensor,
    m: &mut Tensor,
    v: &mut Tensor,
    grad: &Tensor,
    hyper: &AdamWStep,
) -> Result<()> {
    const OP: &str = "adamw_step_";
    let n = value.elem_count() as u64;
    if n == 0 {
        return Ok(());
    }
    let s = AdamWScalars::<T>::new(hyper);
    let scalars = KernelAdamW {
        decay_factor: s.decay_factor,
        lerp_weight: s.lerp_weight,
        beta2: s.beta2,
        one_minus_beta2: s.one_minus_beta2,
        correction2_sqrt: s.correction2_sqrt,
        eps: s.eps,
        neg_step_size: s.neg_step_size,
        decay: i32::from(s.decay),
        lerp_low: i32::from(s.lerp_low),
    };
    let kernel = kernel_for(OP, "adamw", value, n)?;
    let width = value.dtype().size_in_bytes();
    let starts = [&*value, &*m, &*v].map(|t| t.storage_offset() * width);
    let g_view = dense_view(grad)?;
    let m_target = output_storage(m)?;
    let stream = m_target.stream()?;
    let mut m_view = m_target.bytes_mut().slice_mut(starts[1]..);
    let v_target = output_storage(v)?;
    let mut v_view = v_target.bytes_mut().slice_mut(starts[2]..);
    let p_target = output_storage(value)?;
    let mut p_view = p_target.bytes_mut().slice_mut(starts[0]..);
    let mut args = kernel.args(&stream);
    args.arg(&n)
        .arg(&scalars)
        .arg(&g_view)
        .arg(&mut m_view)
        .arg(&mut v_view)
        .arg(&mut p_view);
    // SAFETY: matches `ditto_adamw_<T>(u64 n, DittoAdamW<T> s, const T* g, T* m, T* v,
    // T* p)`; all four are contiguous with `n` elements from their first one, and
    // `output_storage` made the three written storages unique, so none aliases another
    // or the gradient.
    unsafe { kernel.launch(args) }?;
    Ok(())
}
