//! Dropout: `dropout`, `dropout_with_mask`, `dropout_into` and `dropout_backward`.
//!
//! Where each piece lives (dropout is one op across three crates):
//! - here: the API and [`DropoutState`]; `forward.rs`, the forward pass as a
//!   [`Sampler`](crate::Sampler) (CPU body, and the CUDA kernel it names), also the
//!   regenerating backward; `backward.rs`, the backward pass from a saved mask;
//!   `mask.rs`, the packed mask on the CPU; `rows.rs`, [`dropout_rows`], some rows of
//!   a batch reserved once (data parallel ranks);
//! - the keep rule, `u >= p`: `dropout_keep` in `crate::stream::convert` (and its CUDA
//!   twin in `crates/kernels/cuda/ditto_math.cuh`);
//! - the CUDA bodies: `crates/kernels/cuda/dropout.cuh`; the kernels themselves: the
//!   bottom of `crates/kernels/cuda/random.cu`; their arguments:
//!   `crates/kernels/src/launch/dropout.rs`; the packed mask's layout, shared by CPU and
//!   GPU: `crates/kernels/src/mask.rs`;
//! - their host-parity tests: `dropout_matches` in
//!   `crates/rng-gen/tests/integration/cuda_header_parity.rs`; GPU against CPU:
//!   `tests/integration/gpu_random.rs`.

mod backward;
mod forward;
pub(crate) mod mask;
mod packed;
mod rows;

pub use backward::dropout_backward;
pub use packed::PackedMask;
pub use rows::{dropout_rows, AttentionDropout};

use std::sync::atomic::AtomicU32;

use half::{bf16, f16};
use tensor_core::audit::{OpRecorder, RngRecord};
use tensor_core::{DType, Storage, Tensor, TensorError};

use self::forward::{DropoutFloat, DropoutForward, MaskOut};
use self::mask::{all_kept, clear_tail, mask_len};
use super::args::{check_float, generator_for, probability};
use super::pipeline::{run_recorded, Stream, Target};
use crate::stream::increment::{increment_for, RandomOp};
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
    /// [`dropout_with_mask`]: on the device the forward ran on, where backward reads it.
    pub packed_mask: Option<PackedMask>,
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
#[track_caller]
pub fn dropout(
    x: &Tensor,
    p: f64,
    train: bool,
    generator: Option<&Generator>,
) -> Result<(Tensor, DropoutState), RngError> {
    let (out, state) = dropout_op("dropout", x, p, train, None, generator, false)?;
    Ok((out.expect("a new output"), state))
}

/// [`dropout`] that also stores the packed keep-mask (n / 8 bytes) in the state, so
/// backward reads it instead of recomputing Philox.
#[track_caller]
pub fn dropout_with_mask(
    x: &Tensor,
    p: f64,
    train: bool,
    generator: Option<&Generator>,
) -> Result<(Tensor, DropoutState), RngError> {
    let (out, state) = dropout_op("dropout", x, p, train, None, generator, true)?;
    Ok((out.expect("a new output"), state))
}

/// [`dropout`] (or, with `keep_mask`, [`dropout_with_mask`]) written into the existing
/// tensor `out` (`torch.nn.functional.dropout(x, out=...)` in spirit): the same values,
/// state and consumption. `out` must have `x`'s dims, dtype and device and be contiguous
/// (a strided view is a `NotContiguous` error); `x` may be any view.
#[track_caller]
pub fn dropout_into(
    x: &Tensor,
    p: f64,
    train: bool,
    out: &mut Tensor,
    generator: Option<&Generator>,
    keep_mask: bool,
) -> Result<DropoutState, RngError> {
    const OP: &str = "dropout_into";
    if out.dims() != x.dims() {
        return Err(TensorError::ShapeMismatch {
            op: OP,
            lhs: x.dims().to_vec(),
            rhs: out.dims().to_vec(),
        }
        .into());
    }
    if out.device() != x.device() {
        return Err(TensorError::DeviceMismatch {
            op: OP,
            lhs: x.device(),
            rhs: out.device(),
        }
        .into());
    }
    Ok(dropout_op(OP, x, p, train, Some(out), generator, keep_mask)?.1)
}

/// The factor applied to kept elements for drop probability `p` (in [0, 1]):
/// `1 / (1 - p)` in f32, computed once on the host; 0 for `p == 1`, where nothing is
/// kept.
#[track_caller]
pub(crate) fn dropout_scale(p: f32) -> f32 {
    if p == 1.0 {
        0.0
    } else {
        1.0 / (1.0 - p)
    }
}

/// Forward into a new tensor (`out == None`, returned) or into `out`.
#[track_caller]
fn dropout_op(
    op: &'static str,
    x: &Tensor,
    p: f64,
    train: bool,
    out: Option<&mut Tensor>,
    generator: Option<&Generator>,
    want_mask: bool,
) -> Result<(Option<Tensor>, DropoutState), RngError> {
    check_float(op, x.dtype())?;
    let p32 = probability(op, p)?;
    if let Some(out) = &out {
        if out.dtype() != x.dtype() {
            return Err(TensorError::DTypeMismatch {
                op,
                expected: x.dtype(),
                got: out.dtype(),
            }
            .into());
        }
    }
    let device = x.device();
    let generator = generator_for(op, device, generator)?;
    let n = x.elem_count();
    let mut state = DropoutState {
        key: generator.key(),
        p,
        scale: 1.0,
        n: n as u64,
        train,
        packed_mask: None,
    };
    if !train || p32 == 0.0 {
        // The identity. Training still reserves, so p = 0 consumes what p = 0.5 does.
        let mask = want_mask.then(|| all_kept(n)).transpose()?;
        let result = match out {
            Some(out) => {
                out.copy_from_(x)?;
                None
            }
            None => Some(x.clone()),
        };
        if train {
            // Recorded like the computing path: the reservation is what a diff compares.
            let mut recorder = OpRecorder::begin(op, &[x]);
            let blocks = increment_for(RandomOp::Dropout, x.dtype(), n as u64);
            state.key = crate::graph::reserve(op, &generator, blocks)?.key;
            recorder.rng(RngRecord {
                device,
                seed: state.key.seed,
                offset: state.key.offset,
                blocks,
            });
            recorder.finish(x); // the identity: the output is `x`
        }
        state.packed_mask = mask.map(PackedMask::Host);
        return Ok((result, state));
    }
    state.scale = dropout_scale(p32);
    let x = x.contiguous()?;
    let target = match out {
        Some(out) => Target::Existing(out),
        None => Target::New {
            dims: x.dims(),
            device,
        },
    };
    let stream = Stream::Reserve(Some(&generator));
    let (tensor, key, mask) = match x.dtype() {
        DType::F32 => forward::<f32>(op, &x, p32, state.scale, want_mask, target, stream)?,
        DType::F64 => forward::<f64>(op, &x, p32, state.scale, want_mask, target, stream)?,
        DType::F16 => forward::<f16>(op, &x, p32, state.scale, want_mask, target, stream)?,
        _ => forward::<bf16>(op, &x, p32, state.scale, want_mask, target, stream)?,
    };
    state.key = key;
    state.packed_mask = mask;
    Ok((tensor, state))
}

/// What [`forward`] returns: the new tensor (none when it wrote into a given one), the
/// key it drew from, and the packed mask (when asked for).
type Forwarded = (Option<Tensor>, Key, Option<PackedMask>);

/// Runs [`DropoutForward`] on the contiguous `x` into `target`, with the packed mask
/// when `want_mask`.
#[track_caller]
fn forward<T: DropoutFloat>(
    op: &'static str,
    x: &Tensor,
    p: f32,
    scale: f32,
    want_mask: bool,
    target: Target<'_>,
    stream: Stream<'_>,
) -> Result<Forwarded, RngError> {
    let n = x.elem_count();
    let words = if want_mask { mask_len(n) } else { 0 };
    match x.storage() {
        Storage::Cpu(_) => {
            let mask_words = tensor_core::try_zeroed_vec::<u32>(words)?;
            let mask_words: Vec<AtomicU32> = mask_words.into_iter().map(AtomicU32::new).collect();
            let sampler = DropoutForward {
                op,
                x: x.as_slice::<T>()?,
                #[cfg(feature = "cuda")]
                x_cuda: None,
                p,
                scale,
                mask: if want_mask {
                    MaskOut::Cpu(&mask_words)
                } else {
                    MaskOut::None
                },
            };
            let ran = run_recorded(sampler, target, stream, &[x])?;
            let mask = want_mask.then(|| {
                let mut mask: Vec<u32> =
                    mask_words.into_iter().map(AtomicU32::into_inner).collect();
                clear_tail(&mut mask, n);
                PackedMask::Host(mask)
            });
            Ok((ran.tensor, ran.key, mask))
        }
        #[cfg(feature = "cuda")]
        Storage::Cuda(storage) => {
            use tensor_core::cuda::CudaStorage;
            // The kernel writes every word (bits past the last element 0).
            let mut mask_words = if want_mask {
                Some(CudaStorage::alloc_uninit(
                    storage.ordinal(),
                    DType::U32,
                    words,
                )?)
            } else {
                None
            };
            let sampler = DropoutForward::<T> {
                op,
                x: &[],
                x_cuda: Some((storage, x.storage_offset())),
                p,
                scale,
                mask: match &mut mask_words {
                    Some(m) => MaskOut::Cuda(m),
                    None => MaskOut::None,
                },
            };
            let ran = run_recorded(sampler, target, stream, &[x])?;
            // The mask stays on the device: no copy, no wait (see `packed.rs`).
            let mask = mask_words.map(|m| PackedMask::Device(std::sync::Arc::new(m)));
            Ok((ran.tensor, ran.key, mask))
        }
        #[allow(unreachable_patterns)]
        _ => Err(TensorError::NotImplementedOnDevice {
            op,
            device: x.device(),
        }
        .into()),
    }
}

#[cfg(test)]
pub(crate) mod samplers {
    //! The forward sampler, for the SIMD-versus-scalar tests.
    pub(crate) use super::forward::{DropoutFloat, DropoutForward, MaskOut};
}
