//! The optimisers' steps on CUDA tensors, one kernel each over a parameter, its state
//! and its gradient: [`Tensor::sgd_momentum_step_`] (the element rule
//! `ditto_sgd_momentum_op` of `cuda/tensor_ops.cuh`, the CPU loop of `ops/optimizers/fused_sgd.rs`)
//! and one AdamW step (`cuda/transformer_ops.cuh`, the CPU loop of `ops/optimizers/adamw.rs`).

use cudarc::driver::{CudaViewMut, DeviceRepr, PushKernelArg};

use crate::ops::cuda::{dense_view, output_storage, storage_of};
use crate::ops::elementwise::cuda::kernel_for;
use crate::ops::optimizers::adamw::AdamWScalars;
use crate::ops::optimizers::fused_sgd::{SgdMomentumStep, StepScalars};
use crate::ops::AdamWStep;
use crate::{DType, Element, Result, Tensor};

/// `$step::<f32>` or `$step::<f64>` for `$value`'s dtype, given its element count `n`
/// first; nothing for an empty tensor (no kernel to launch).
macro_rules! float_step {
    ($value:expr, $step:ident($($arg:expr),+)) => {
        match ($value.dtype(), $value.elem_count() as u64) {
            (_, 0) => Ok(()),
            (DType::F32, n) => $step::<f32>(n, $($arg),+),
            (_, n) => $step::<f64>(n, $($arg),+),
        }
    };
}

/// `value`, `buf` and `grad` are contiguous CUDA tensors of one float dtype, device and
/// shape (the caller checked).
pub(crate) fn sgd_momentum_step_(
    value: &mut Tensor,
    buf: &mut Tensor,
    grad: &Tensor,
    hyper: &SgdMomentumStep,
) -> Result<()> {
    float_step!(value, sgd_momentum(value, buf, grad, hyper))
}

/// The bytes of contiguous `t` from its first element, for a kernel to write in place:
/// `output_storage` makes its storage unique first, so the view aliases no other tensor.
fn dense_view_mut(t: &mut Tensor) -> Result<CudaViewMut<'_, u8>> {
    let start = t.storage_offset() * t.dtype().size_in_bytes();
    Ok(output_storage(t)?.bytes_mut().slice_mut(start..))
}

fn sgd_momentum<T: Element + DeviceRepr>(
    n: u64,
    value: &mut Tensor,
    buf: &mut Tensor,
    grad: &Tensor,
    hyper: &SgdMomentumStep,
) -> Result<()> {
    let s = StepScalars::<T>::new(hyper);
    let (decay, nesterov) = (i32::from(s.decay), i32::from(s.nesterov));
    let kernel = kernel_for("sgd_momentum_step_", "sgd_momentum", value, n)?;
    let stream = storage_of(grad)?.0.stream()?;
    let g_view = dense_view(grad)?;
    let mut b_view = dense_view_mut(buf)?;
    let mut p_view = dense_view_mut(value)?;
    let mut args = kernel.args(&stream);
    args.arg(&n)
        .arg(&s.weight_decay)
        .arg(&s.momentum)
        .arg(&s.keep)
        .arg(&s.step)
        .arg(&decay)
        .arg(&nesterov)
        .arg(&g_view)
        .arg(&mut b_view)
        .arg(&mut p_view);
    // SAFETY: matches `ditto_sgd_momentum_<T>(u64 n, T, T, T, T, int, int, const T* g,
    // T* b, T* p)`; all three are contiguous with `n` elements from their first one.
    // `output_storage` made the buffer's and the parameter's storage unique, so neither
    // aliases the other or the gradient (which holds its own reference).
    unsafe { kernel.launch(args) }
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
    float_step!(value, adamw(value, m, v, grad, hyper))
}

fn adamw<T: Element + DeviceRepr>(
    n: u64,
    value: &mut Tensor,
    m: &mut Tensor,
    v: &mut Tensor,
    grad: &Tensor,
    hyper: &AdamWStep,
) -> Result<()> {
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
    let kernel = kernel_for("adamw_step_", "adamw", value, n)?;
    let stream = storage_of(grad)?.0.stream()?;
    let g_view = dense_view(grad)?;
    let mut m_view = dense_view_mut(m)?;
    let mut v_view = dense_view_mut(v)?;
    let mut p_view = dense_view_mut(value)?;
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

/// `[norm, factor]` of the sums of squares `sums` (`ops/optimizers/clip.rs`), computed by
/// one thread on the device: nothing is read back.
pub(crate) fn clip_coefficients(sums: &Tensor, max_norm: f64) -> Result<Tensor> {
    let sums = crate::ops::cuda::dense(sums)?;
    let ordinal = storage_of(&sums)?.1;
    let mut out = crate::ops::cuda::uninit(&[2], sums.dtype(), ordinal)?;
    let kernel = kernel_for("clip_coefficients", "clip_coefficients", &sums, 1)?;
    let n = sums.elem_count() as u64;
    let view = dense_view(&sums)?;
    let dst = output_storage(&mut out)?;
    let stream = dst.stream()?;
    let mut args = kernel.args(&stream);
    args.arg(&n).arg(&max_norm).arg(&view).arg(dst.bytes_mut());
    // SAFETY: matches `ditto_clip_coefficients_<T>(u64 n, double max_norm, const T* sums,
    // T* out)`: `sums` holds `n` dense elements, `out` two.
    unsafe { kernel.launch(args) }?;
    Ok(out)
}
