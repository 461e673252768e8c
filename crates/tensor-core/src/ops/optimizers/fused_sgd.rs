//! SGD with momentum as one op over a parameter, its momentum buffer and its gradient
//! (what `torch.optim.SGD(..., fused=True)` runs), on the CPU and as one CUDA kernel.
//!
//! Written with whole-tensor ops, a step past the first reads and writes the buffer and
//! the parameter three times (`scale_`, `axpy_`, `axpy_`; three kernel launches per
//! parameter on a GPU). This op does the same per-element operations in the same order
//! and precision (every `a + b * c` a multiply then an add, scalars rounded to the dtype
//! first, as `axpy_` and `scale_` do), so its result is bit-identical to theirs; only
//! memory traffic and launches drop. Being one op on every device also makes a CPU run
//! and a GPU run record the same sequence of ops in an audit trace (`ditto-audit diff`
//! can then compare them op by op).

use std::ops::{Add, Mul};

use rayon::prelude::*;

use crate::audit::OpRecorder;
use crate::{DType, Element, Result, Tensor, TensorError};

/// The hyper-parameters of one step of SGD with momentum, as `torch.optim.SGD` names
/// them. `momentum` must be non-zero: the first step (which creates the buffer) is not
/// this op's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdMomentumStep {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor.
    pub momentum: f64,
    /// Dampening for momentum.
    pub dampening: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// Nesterov momentum.
    pub nesterov: bool,
}

/// The step's scalars rounded to the dtype once, as the whole-tensor ops round them.
#[derive(Clone, Copy)]
pub struct StepScalars<T> {
    /// The weight decay, rounded.
    pub weight_decay: T,
    /// The momentum, rounded.
    pub momentum: T,
    /// `1 - dampening`, rounded: the share of the gradient the buffer keeps.
    pub keep: T,
    /// `-lr`, rounded: the step's factor.
    pub step: T,
    /// Whether weight decay is applied (a zero decay skips its multiply).
    pub decay: bool,
    /// Nesterov momentum.
    pub nesterov: bool,
}

impl<T: Element> StepScalars<T> {
    /// `h`'s scalars rounded to `T` once.
    pub fn new(h: &SgdMomentumStep) -> Self {
        Self {
            weight_decay: T::from_f64(h.weight_decay),
            momentum: T::from_f64(h.momentum),
            keep: T::from_f64(1.0 - h.dampening),
            step: T::from_f64(-h.lr),
            decay: h.weight_decay != 0.0,
            nesterov: h.nesterov,
        }
    }
}

impl Tensor {
    /// One step of SGD with momentum past the first, in place on this parameter and its
    /// `momentum_buffer`, from `grad`: `d = g + weight_decay * p`,
    /// `buf = buf * momentum + (1 - dampening) * d`, `d = d + momentum * buf` (Nesterov)
    /// or `d = buf`, `p = p + (-lr) * d`; bit-identical to the same rule written with
    /// [`Tensor::axpy_`] and [`Tensor::scale_`], on every device.
    ///
    /// All three tensors must be contiguous, of one float dtype (f32 or f64), one device
    /// and one shape, and `momentum` non-zero; anything else is a typed error and
    /// nothing is written.
    #[track_caller]
    pub fn sgd_momentum_step_(
        &mut self,
        momentum_buffer: &mut Tensor,
        grad: &Tensor,
        hyper: &SgdMomentumStep,
    ) -> Result<()> {
        const OP: &str = "sgd_momentum_step_";
        for other in [&*momentum_buffer, grad] {
            self.require_compatible(OP, other)?;
            self.require_same_dims(OP, other)?;
        }
        for t in [&*self, &*momentum_buffer, grad] {
            if !t.is_contiguous() {
                return Err(TensorError::NotContiguous {
                    op: OP,
                    dims: t.dims().to_vec(),
                    strides: t.strides().to_vec(),
                });
            }
        }
        if hyper.momentum == 0.0 {
            return Err(TensorError::InvalidArgument {
                op: OP,
                message: "momentum is 0: plain SGD has no momentum buffer; expected a \
                          non-zero momentum"
                    .into(),
            });
        }
        if !matches!(self.dtype(), DType::F32 | DType::F64) {
            return Err(TensorError::UnsupportedDType {
                op: OP,
                dtype: self.dtype(),
                supported: "f32, f64",
            });
        }
        // Inputs hashed before the update, the updated parameter as the output (the
        // buffer shows up as an input of the next step).
        let recorder = OpRecorder::begin("sgd_momentum_step", &[&*self, momentum_buffer, grad]);
        let result = self.sgd_momentum_step_on_device(momentum_buffer, grad, hyper);
        if result.is_ok() {
            recorder.finish(self);
        }
        result
    }

    fn sgd_momentum_step_on_device(
        &mut self,
        buf: &mut Tensor,
        grad: &Tensor,
        hyper: &SgdMomentumStep,
    ) -> Result<()> {
        on_cuda!(self => crate::ops::cuda::sgd_momentum_step_(self, buf, grad, hyper));
        self.require_cpu("sgd_momentum_step_")?;
        match self.dtype() {
            DType::F32 => cpu_step::<f32>(self, buf, grad, &StepScalars::new(hyper)),
            _ => cpu_step::<f64>(self, buf, grad, &StepScalars::new(hyper)),
        }
    }
}

/// The rule for every element, in the order the whole-tensor ops apply it; parameters of
/// at least [`SGD_PAR_MIN_LEN`] elements are cut into one contiguous piece per thread.
fn cpu_step<T>(
    value: &mut Tensor,
    buf: &mut Tensor,
    grad: &Tensor,
    s: &StepScalars<T>,
) -> Result<()>
where
    T: Element + Add<Output = T> + Mul<Output = T>,
{
    let g = grad.as_slice::<T>()?;
    let b = buf.as_mut_slice::<T>()?;
    let p = value.as_mut_slice::<T>()?;
    let threads = rayon::current_num_threads();
    if threads == 1 || p.len() < SGD_PAR_MIN_LEN {
        step_slice(p, b, g, s);
        return Ok(());
    }
    // Pieces of whole 64-byte lines: where the buffer starts on a line (the allocator
    // aligns large blocks), no cache line is written by two threads.
    let line = 64 / std::mem::size_of::<T>().max(1);
    let piece = p.len().div_ceil(threads).div_ceil(line) * line;
    p.par_chunks_mut(piece)
        .zip(b.par_chunks_mut(piece))
        .zip(g.par_chunks(piece))
        .for_each(|((p, b), g)| step_slice(p, b, g, s));
    Ok(())
}

/// Parameters shorter than this are updated on the calling thread.
const SGD_PAR_MIN_LEN: usize = 1 << 18;

fn step_slice<T>(p: &mut [T], b: &mut [T], g: &[T], s: &StepScalars<T>)
where
    T: Element + Add<Output = T> + Mul<Output = T>,
{
    for ((p, b), &g) in p.iter_mut().zip(b.iter_mut()).zip(g) {
        let d = if s.decay { g + s.weight_decay * *p } else { g };
        *b = *b * s.momentum + s.keep * d;
        let d = if s.nesterov { d + s.momentum * *b } else { *b };
        *p = *p + s.step * d;
    }
}
