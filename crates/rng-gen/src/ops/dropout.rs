//! `dropout` and its backward pass.

use half::{bf16, f16};
use kernels::RandomOp;
use tensor_core::{DType, Device, Tensor};

use super::args::{check_float, cpu_tensor, generator_for, probability};
use super::cuda_dispatch;
use super::mask::{all_kept, apply, dropout_fused, mask_len};
use crate::stream::key::Key;
use crate::{Generator, RngError};

/// What backward needs to reproduce a dropout mask: the key it was drawn from (about 24
/// bytes), or optionally the mask packed one bit per element. Never a byte per element.
#[derive(Clone, Debug, PartialEq)]
pub struct DropoutState {
    /// Seed and base offset the mask was drawn from (in eval mode: the generator's
    /// position, unused).
    pub key: Key,
    /// The drop probability.
    pub p: f64,
    /// The factor applied to kept elements: `1 / (1 - p)` in f32, 1 when nothing is
    /// dropped, 0 when everything is (`p == 1`).
    pub scale: f32,
    /// Element count of the input.
    pub n: u64,
    /// Whether the forward pass dropped anything at all (train mode).
    pub train: bool,
    /// The keep-mask, bit `i % 32` of word `i / 32`, when requested with
    /// [`dropout_with_mask`].
    pub packed_mask: Option<Vec<u32>>,
}

impl DropoutState {
    /// True when the forward pass was the identity (eval mode or `p` rounding to 0).
    fn is_identity(&self) -> bool {
        !self.train || self.p as f32 == 0.0
    }
}

/// Dropout (`torch.nn.functional.dropout`): in training, each element is kept iff the
/// f32 uniform of its word is `>= p` and then multiplied by `scale = 1 / (1 - p)`
/// (computed once, in f32, on the host), otherwise set to +0.0 (also for NaN inputs).
/// f16 / bf16 are scaled in f32 and rounded to nearest even, f64 in f64.
///
/// Consumption depends only on `n` and dtype, never on `p`: with `train` the same
/// offset is reserved for `p = 0` as for `p = 0.5`, so later ops do not move when `p`
/// is tuned. `p = 0` then returns `x` itself; `p = 1` returns zeros. With `train ==
/// false` nothing is drawn and nothing reserved (eval mode uses no randomness) and `x`
/// is returned as is. Errors unless `x` is a float tensor and `p` is in [0, 1].
pub fn dropout(
    x: &Tensor,
    p: f64,
    train: bool,
    generator: Option<&Generator>,
) -> Result<(Tensor, DropoutState), RngError> {
    dropout_op(x, p, train, generator, false)
}

/// [`dropout`] that also stores the packed keep-mask (n / 8 bytes) in the state, so
/// backward reads it instead of recomputing Philox.
pub fn dropout_with_mask(
    x: &Tensor,
    p: f64,
    train: bool,
    generator: Option<&Generator>,
) -> Result<(Tensor, DropoutState), RngError> {
    dropout_op(x, p, train, generator, true)
}

fn dropout_op(
    x: &Tensor,
    p: f64,
    train: bool,
    generator: Option<&Generator>,
    want_mask: bool,
) -> Result<(Tensor, DropoutState), RngError> {
    const OP: &str = "dropout";
    check_float(OP, x.dtype())?;
    let p32 = probability(OP, p)?;
    let device = x.device();
    let generator = generator_for(OP, device, generator)?;
    let n = x.elem_count();
    let mut state = DropoutState {
        key: generator.key(),
        p,
        scale: 1.0,
        n: n as u64,
        train,
        packed_mask: None,
    };
    if !train {
        state.packed_mask = want_mask.then(|| all_kept(n)).transpose()?;
        return Ok((x.clone(), state));
    }
    state.key = generator.reserve(RandomOp::Dropout, x.dtype(), n as u64);
    if p32 == 0.0 {
        state.packed_mask = want_mask.then(|| all_kept(n)).transpose()?;
        return Ok((x.clone(), state));
    }
    state.scale = dropout_scale(p32);
    if let Device::Cuda(ordinal) = device {
        let (out, mask) =
            cuda_dispatch::dropout(x, state.key, n as u64, p32, state.scale, want_mask, ordinal)?;
        state.packed_mask = mask;
        return Ok((out, state));
    }
    let (out, mask) = dropout_cpu(x, state.key, p32, state.scale, want_mask)?;
    state.packed_mask = mask;
    Ok((out, state))
}

/// The factor applied to kept elements for drop probability `p` (in [0, 1]):
/// `1 / (1 - p)` in f32, computed once on the host; 0 for `p == 1`, where nothing is
/// kept.
pub(crate) fn dropout_scale(p: f32) -> f32 {
    if p == 1.0 {
        0.0
    } else {
        1.0 / (1.0 - p)
    }
}

/// Backward of [`dropout`]: `grad * scale` where the forward pass kept the element, 0
/// elsewhere; the mask is read from `state.packed_mask` or regenerated from
/// `state.key`. Identity for eval mode and `p = 0`. Errors unless `grad` is a float
/// tensor with the forward input's element count.
pub fn dropout_backward(grad: &Tensor, state: &DropoutState) -> Result<Tensor, RngError> {
    check_float("dropout_backward", grad.dtype())?;
    let n = grad.elem_count();
    if n as u64 != state.n {
        return Err(RngError::DropoutSizeMismatch {
            expected: state.n,
            got: n as u64,
        });
    }
    if let Some(mask) = &state.packed_mask {
        if mask.len() != mask_len(n) {
            return Err(RngError::InconsistentState {
                reason: "dropout packed mask length does not match the element count",
            });
        }
    }
    if state.is_identity() {
        return Ok(grad.clone());
    }
    let p32 = probability("dropout_backward", state.p)?;
    if let Device::Cuda(ordinal) = grad.device() {
        let mask = state.packed_mask.as_deref();
        return cuda_dispatch::dropout_backward(
            grad,
            state.key,
            state.n,
            p32,
            state.scale,
            mask,
            ordinal,
        );
    }
    match &state.packed_mask {
        Some(mask) => scale_kept(grad, mask, state.scale),
        None => Ok(dropout_cpu(grad, state.key, p32, state.scale, false)?.0),
    }
}

/// Dropout of a CPU float tensor from the stream at `key`: `x * scale` where
/// `dropout_keep(word i, p)`, +0.0 elsewhere (the same values as [`scale_kept`] with the
/// keep-mask of `key`), and that mask packed when `want_mask`.
fn dropout_cpu(
    x: &Tensor,
    key: Key,
    p: f32,
    scale: f32,
    want_mask: bool,
) -> Result<(Tensor, Option<Vec<u32>>), RngError> {
    let x = x.contiguous()?;
    let dims = x.dims();
    let (out, mask) = match x.dtype() {
        DType::F32 => {
            let (out, mask) = dropout_fused(
                x.as_slice::<f32>()?,
                key,
                p,
                0.0,
                move |v| v * scale,
                want_mask,
            )?;
            (cpu_tensor(out, dims)?, mask)
        }
        DType::F64 => {
            let scale = f64::from(scale);
            let (out, mask) = dropout_fused(
                x.as_slice::<f64>()?,
                key,
                p,
                0.0,
                move |v| v * scale,
                want_mask,
            )?;
            (cpu_tensor(out, dims)?, mask)
        }
        DType::F16 => {
            let kept = move |v: f16| f16::from_f32(v.to_f32() * scale);
            let x = x.as_slice::<f16>()?;
            let (out, mask) = dropout_fused(x, key, p, f16::ZERO, kept, want_mask)?;
            (cpu_tensor(out, dims)?, mask)
        }
        _ => {
            let kept = move |v: bf16| bf16::from_f32(v.to_f32() * scale);
            let x = x.as_slice::<bf16>()?;
            let (out, mask) = dropout_fused(x, key, p, bf16::ZERO, kept, want_mask)?;
            (cpu_tensor(out, dims)?, mask)
        }
    };
    Ok((out, mask))
}

/// `x * scale` where `mask` keeps, +0.0 elsewhere, on a CPU float tensor.
fn scale_kept(x: &Tensor, mask: &[u32], scale: f32) -> Result<Tensor, RngError> {
    let x = x.contiguous()?;
    let dims = x.dims();
    match x.dtype() {
        DType::F32 => cpu_tensor(
            apply(x.as_slice::<f32>()?, mask, 0.0, move |v| v * scale)?,
            dims,
        ),
        DType::F64 => {
            let scale = f64::from(scale);
            cpu_tensor(
                apply(x.as_slice::<f64>()?, mask, 0.0, move |v| v * scale)?,
                dims,
            )
        }
        DType::F16 => {
            let kept = move |v: f16| f16::from_f32(v.to_f32() * scale);
            cpu_tensor(apply(x.as_slice::<f16>()?, mask, f16::ZERO, kept)?, dims)
        }
        _ => {
            let kept = move |v: bf16| bf16::from_f32(v.to_f32() * scale);
            cpu_tensor(apply(x.as_slice::<bf16>()?, mask, bf16::ZERO, kept)?, dims)
        }
    }
}
