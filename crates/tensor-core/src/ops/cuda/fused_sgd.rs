//! The CUDA side of [`Tensor::sgd_momentum_step_`]: one kernel over the parameter, its
//! momentum buffer and its gradient, running the element rule of `cuda/tensor_ops.cuh`
//! (`ditto_sgd_momentum_op`), the same arithmetic as the CPU loop in `ops/fused_sgd.rs`.

use cudarc::driver::{DeviceRepr, PushKernelArg};

use super::elementwise::float_suffix;
use super::{dense_view, output_storage, storage_of, TensorKernel};
use crate::ops::fused_sgd::{SgdMomentumStep, StepScalars};
use crate::{DType, Element, Result, Tensor};

/// `value`, `buf` and `grad` are contiguous CUDA tensors of one float dtype, device and
/// shape (the caller checked).
pub(crate) fn sgd_momentum_step_(
    value: &mut Tensor,
    buf: &mut Tensor,
    grad: &Tensor,
    hyper: &SgdMomentumStep,
) -> Result<()> {
    match value.dtype() {
        DType::F32 => launch::<f32>(value, buf, grad, hyper),
        _ => launch::<f64>(value, buf, grad, hyper),
    }
}

fn launch<T: Element + DeviceRepr>(
    value: &mut Tensor,
    buf: &mut Tensor,
    grad: &Tensor,
    hyper: &SgdMomentumStep,
) -> Result<()> {
    const OP: &str = "sgd_momentum_step_";
    let suffix = float_suffix(OP, value.dtype())?;
    let n = value.elem_count() as u64;
    if n == 0 {
        return Ok(());
    }
    let s = StepScalars::<T>::new(hyper);
    let (decay, nesterov) = (i32::from(s.decay), i32::from(s.nesterov));
    let ordinal = storage_of(value)?.1;
    let kernel = TensorKernel::new(ordinal, format!("ditto_sgd_momentum_{suffix}"), n)?;
    let width = value.dtype().size_in_bytes();
    let (p_start, b_start) = (value.storage_offset() * width, buf.storage_offset() * width);
    let g_view = dense_view(grad)?;
    let b_target = output_storage(buf)?;
    let stream = b_target.stream()?;
    let mut b_view = b_target.bytes_mut().slice_mut(b_start..);
    let p_target = output_storage(value)?;
    let mut p_view = p_target.bytes_mut().slice_mut(p_start..);
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
