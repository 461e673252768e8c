//! The optimisers' steps on CUDA tensors, one kernel each over a parameter, its state
//! and its gradient: [`Tensor::sgd_momentum_step_`] (the element rule
//! `ditto_sgd_momentum_op` of `cuda/tensor_ops.cuh`, the CPU loop of `ops/optimizers/fused_sgd.rs`)
//! and one AdamW step (`cuda/transformer_ops.cuh`, the CPU loop of `ops/optimizers/adamw.rs`).

use cudarc::driver::{CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr, PushKernelArg};

use crate::audit::OpRecorder;
use crate::ops::cuda::{dense_view, output_storage, storage_of};
use crate::ops::elementwise::cuda::kernel_for;
use crate::ops::optimizers::adamw::{AdamWScalars, AdamWSlot, ADAMW_MANY};
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
#[derive(Clone, Copy, Debug)]
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

/// The kernel's scalars of one step (`DittoAdamW<T>`).
fn kernel_scalars<T: Element>(hyper: &AdamWStep) -> KernelAdamW<T> {
    let s = AdamWScalars::<T>::new(hyper);
    KernelAdamW {
        decay_factor: s.decay_factor,
        lerp_weight: s.lerp_weight,
        beta2: s.beta2,
        one_minus_beta2: s.one_minus_beta2,
        correction2_sqrt: s.correction2_sqrt,
        eps: s.eps,
        neg_step_size: s.neg_step_size,
        decay: i32::from(s.decay),
        lerp_low: i32::from(s.lerp_low),
    }
}

fn adamw<T: Element + DeviceRepr>(
    n: u64,
    value: &mut Tensor,
    m: &mut Tensor,
    v: &mut Tensor,
    grad: &Tensor,
    hyper: &AdamWStep,
) -> Result<()> {
    let scalars = kernel_scalars::<T>(hyper);
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

/// `DittoAdamWMany<T>` in `cuda/transformer_ops.cuh`: up to [`ADAMW_MANY`] parameters'
/// element counts, device addresses and scalars, field for field.
#[repr(C)]
#[derive(Clone, Copy)]
struct KernelAdamWMany<T> {
    n: [u64; ADAMW_MANY],
    g: [u64; ADAMW_MANY],
    m: [u64; ADAMW_MANY],
    v: [u64; ADAMW_MANY],
    p: [u64; ADAMW_MANY],
    s: [KernelAdamW<T>; ADAMW_MANY],
}

// SAFETY: a `repr(C)` struct of five arrays of u64 (the kernel's `ditto_u64` counts and
// 64-bit pointers) and one of `KernelAdamW<T>`, the layout of `DittoAdamWMany<T>`.
unsafe impl<T: DeviceRepr> DeviceRepr for KernelAdamWMany<T> {}

/// The checked CUDA slots of `adamw_step_many_`: one launch per [`ADAMW_MANY`]
/// parameters of one device and dtype, in order.
pub(crate) fn adamw_many(slots: Vec<&mut AdamWSlot<'_>>) -> Result<()> {
    let mut groups: Vec<((usize, DType), Vec<&mut AdamWSlot<'_>>)> = Vec::new();
    for slot in slots {
        let key = (storage_of(slot.param)?.1, slot.param.dtype());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, group)) => group.push(slot),
            None => groups.push((key, vec![slot])),
        }
    }
    for ((_, dtype), mut group) in groups {
        for chunk in group.chunks_mut(ADAMW_MANY) {
            match dtype {
                DType::F32 => adamw_chunk::<f32>(chunk)?,
                _ => adamw_chunk::<f64>(chunk)?,
            }
        }
    }
    Ok(())
}

/// One launch of `ditto_adamw_many_<T>` over up to [`ADAMW_MANY`] slots.
fn adamw_chunk<T: Element + DeviceRepr>(chunk: &mut [&mut AdamWSlot<'_>]) -> Result<()> {
    let recorders: Vec<OpRecorder> = chunk
        .iter()
        .map(|s| {
            OpRecorder::begin(
                "adamw_step",
                &[&*s.param, &*s.exp_avg, &*s.exp_avg_sq, s.grad],
            )
        })
        .collect();
    let size = std::mem::size_of::<T>() as u64;
    let stream = storage_of(chunk[0].grad)?.0.stream()?;
    let first = kernel_scalars::<T>(&chunk[0].hyper);
    let mut list = KernelAdamWMany::<T> {
        n: [0; ADAMW_MANY],
        g: [0; ADAMW_MANY],
        m: [0; ADAMW_MANY],
        v: [0; ADAMW_MANY],
        p: [0; ADAMW_MANY],
        s: [first; ADAMW_MANY],
    };
    let most = chunk
        .iter()
        .map(|s| s.param.elem_count() as u64)
        .max()
        .unwrap_or(0);
    let kernel = match most {
        0 => None,
        _ => Some(
            kernel_for("adamw_step_many_", "adamw_many", chunk[0].param, most)?
                .with_rows(chunk.len() as u32),
        ),
    };
    {
        // The addresses' read / write records, dropped once the launch is queued.
        let mut records = Vec::with_capacity(4 * chunk.len());
        for (i, slot) in chunk.iter_mut().enumerate() {
            let AdamWSlot {
                param,
                exp_avg,
                exp_avg_sq,
                grad,
                hyper,
            } = &mut **slot;
            list.n[i] = param.elem_count() as u64;
            list.s[i] = kernel_scalars::<T>(hyper);
            let (g, record) = storage_of(grad)?.0.bytes().device_ptr(&stream);
            list.g[i] = g + grad.storage_offset() as u64 * size;
            records.push(record);
            let written = [
                (&mut **exp_avg, &mut list.m[i]),
                (&mut **exp_avg_sq, &mut list.v[i]),
                (&mut **param, &mut list.p[i]),
            ];
            for (tensor, address) in written {
                let offset = tensor.storage_offset() as u64 * size;
                // Unique first (copy-on-write), so no other tensor sees the update.
                let (ptr, record) = output_storage(tensor)?.bytes_mut().device_ptr_mut(&stream);
                *address = ptr + offset;
                records.push(record);
            }
        }
        if let Some(kernel) = kernel {
            let mut args = kernel.args(&stream);
            args.arg(&list);
            // SAFETY: matches `ditto_adamw_many_<T>(DittoAdamWMany<T>)`: entry `y < rows`
            // holds a contiguous parameter's, its moments' and its gradient's addresses
            // with `n[y]` elements each (checked by `check_slot`), the three written
            // storages made unique above, so none aliases another or a gradient.
            unsafe { kernel.launch(args) }?;
        }
    }
    for (recorder, slot) in recorders.into_iter().zip(chunk.iter()) {
        recorder.finish(slot.param);
    }
    Ok(())
}
