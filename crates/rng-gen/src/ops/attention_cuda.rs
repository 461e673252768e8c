//! The fused path of [`causal_attention`](super::attention::causal_attention) on CUDA:
//! the tensors' buffers and strides handed to the kernels' launchers
//! (`kernels::launch::attention_forward` / `attention_backward`).
//!
//! It runs inside a CUDA graph capture too ([`crate::graph`]): the dropout reserves
//! through `graph::reserve` as every random op does, and a reservation made within a
//! graph comes with the generator's device words, which the kernels read, so each
//! replay draws the mask the eager op would draw at that point. What cannot be captured
//! is a given stretch ([`AttentionDropout::Rows`], a typed error), and a captured
//! forward's backward must run in the same capture: outside any capture (or an eager
//! forward's inside one) it is a typed error, as it would regenerate the mask from
//! another stretch. (A backward in a *different* capture of the device is not detected:
//! the reservation does not say which capture made it.)

use std::sync::Arc;

use kernels::launch::{
    attention_backward, attention_forward, AttentionBackwardInputs, AttentionGradients,
    AttentionOutputs, AttentionProblem, AttentionStream, HeadOperand, HeadStrides,
    ATTENTION_MAX_HEAD_WIDTH,
};
use tensor_core::cuda::CudaStorage;
use tensor_core::{DType, Device, Storage, Tensor};

use tensor_core::audit::{OpRecorder, RngRecord};

use super::args::{generator_for, probability};
use super::dropout::{dropout_scale, AttentionDropout};
use crate::graph::Reserved;
use crate::{Key, RandomOp, RngError};

/// What the fused backward needs besides q, k and v.
#[derive(Debug)]
pub(crate) struct Fused {
    /// The output, `[batch, t, heads, d]` contiguous.
    out: Tensor,
    /// The rows' log-sum-exp, `[batch, heads, t]`.
    lse: Tensor,
    problem: AttentionProblem,
    mask: MaskStream,
}

/// Where the forward drew the mask from, for the backward to draw it again: besides the
/// problem's `(seed, offset)`, the generator's device words when the forward was
/// captured into a CUDA graph (the offset then counts from the graph's start), and the
/// global rows on the device (`None`: entry `b` is row `b`).
#[derive(Debug)]
struct MaskStream {
    words: Option<Arc<CudaStorage>>,
    rows: Option<Tensor>,
}

impl MaskStream {
    /// As the launchers take it.
    fn launch_args(&self) -> Result<AttentionStream<'_>, RngError> {
        Ok(AttentionStream {
            words: self.words.as_deref(),
            rows: self.rows.as_ref().map(cuda_storage).transpose()?,
        })
    }
}

/// True when the fused kernel computes this attention: f32 on CUDA, default arithmetic,
/// a head width the kernel holds. A graph capture is no exception (module docs).
pub(crate) fn can_fuse(q: &Tensor) -> bool {
    matches!(q.device(), Device::Cuda(_))
        && q.dtype() == DType::F32
        && !tensor_core::are_portable_arithmetic_enabled()
        && q.elem_count() > 0
        && (q.dims()[3] as u64) <= ATTENTION_MAX_HEAD_WIDTH
}

/// `x` with a contiguous last dimension (a copy only when it is not).
fn last_dim_dense(x: &Tensor) -> Result<Tensor, RngError> {
    Ok(if x.strides()[3] == 1 || x.dims()[3] == 1 {
        x.clone()
    } else {
        x.contiguous()?
    })
}

fn cuda_storage(x: &Tensor) -> Result<&CudaStorage, RngError> {
    match x.storage() {
        Storage::Cuda(s) => Ok(s),
        #[allow(unreachable_patterns)]
        _ => Err(RngError::InvalidAttention {
            op: "causal_attention",
            reason: format!("the fused path got a tensor on {}", x.device()),
        }),
    }
}

fn operand(x: &Tensor) -> Result<HeadOperand<'_>, RngError> {
    let s = x.strides();
    Ok(HeadOperand {
        storage: cuda_storage(x)?,
        offset: x.storage_offset(),
        strides: HeadStrides {
            b: s[0] as u64,
            h: s[1] as u64,
            t: s[2] as u64,
        },
    })
}

/// An uninitialised f32 buffer of `dims` on `ordinal`.
fn alloc(ordinal: usize, dims: &[usize]) -> Result<CudaStorage, RngError> {
    Ok(CudaStorage::alloc_uninit(
        ordinal,
        DType::F32,
        dims.iter().product(),
    )?)
}

/// `[batch, t, heads, d]` storage as the `[batch, heads, t, d]` view the op returns.
fn heads_view(storage: CudaStorage, [b, h, t, d]: [usize; 4]) -> Result<Tensor, RngError> {
    Ok(Tensor::from_storage(Storage::Cuda(storage), &[b, t, h, d])?.transpose(1, 2)?)
}

fn dims4(x: &Tensor) -> [usize; 4] {
    let d = x.dims();
    [d[0], d[1], d[2], d[3]]
}

/// The fused forward: `y`, the operands as the kernel read them (last dim dense) and what
/// the fused backward needs besides them; `attention.rs` keeps the three as its saved
/// state, so this file needs none of its types.
pub(crate) fn forward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    dropout: Option<AttentionDropout<'_>>,
) -> Result<(Tensor, [Tensor; 3], Fused), RngError> {
    let [b, h, t, d] = dims4(q);
    let (q, k, v) = (last_dim_dense(q)?, last_dim_dense(k)?, last_dim_dense(v)?);
    let reserved = reserve_for_fused(&[b, h, t, t], &[&q, &k, &v], dropout)?;
    let Device::Cuda(ordinal) = q.device() else {
        unreachable!("can_fuse checked the device")
    };
    // p = 0 keeps everything with scale 1: the reservation is made, no mask needed.
    let drops = matches!(&reserved, Some(d) if d.p > 0.0);
    let (key, p, words, rows) = match reserved {
        Some(d) => (d.reserved.key, d.p, d.reserved.words, d.rows),
        None => (Key { seed: 0, offset: 0 }, 0.0, None, None),
    };
    let problem = AttentionProblem {
        batch: b as u64,
        heads: h as u64,
        t: t as u64,
        d: d as u64,
        seed: key.seed,
        offset: key.offset,
        scale: scale as f32,
        p,
        keep_scale: dropout_scale(p),
        dropout: i32::from(drops),
    };
    let mask = MaskStream {
        words: words.filter(|_| drops),
        rows: rows.map(|r| upload_rows(&r, ordinal)).transpose()?,
    };
    let mut out = alloc(ordinal, &[b, t, h, d])?;
    let mut lse = alloc(ordinal, &[b, h, t])?;
    attention_forward(
        &problem,
        mask.launch_args()?,
        [operand(&q)?, operand(&k)?, operand(&v)?],
        AttentionOutputs {
            out: &mut out,
            lse: &mut lse,
        },
    )
    .map_err(kernel_error(ordinal))?;
    let out_rows = Tensor::from_storage(Storage::Cuda(out), &[b, t, h, d])?;
    let y = out_rows.transpose(1, 2)?;
    let lse = Tensor::from_storage(Storage::Cuda(lse), &[b, h, t])?;
    let fused = Fused {
        out: out_rows,
        lse,
        problem,
        mask,
    };
    Ok((y, [q, k, v], fused))
}

pub(crate) fn backward(
    grad: &Tensor,
    [q, k, v]: [&Tensor; 3],
    fused: &Fused,
) -> Result<[Tensor; 3], RngError> {
    let dims @ [b, h, t, _] = dims4(q);
    let grad = last_dim_dense(grad)?;
    let Device::Cuda(ordinal) = q.device() else {
        unreachable!("the forward was fused")
    };
    if fused.problem.dropout != 0 {
        let graphed = fused.mask.words.is_some();
        crate::graph::refuse_regenerating_elsewhere("causal_attention_backward", ordinal, graphed)?;
    }
    let mut delta = alloc(ordinal, &[b, h, t])?;
    let (mut dq, mut dk, mut dv) = (
        alloc(ordinal, &dims)?,
        alloc(ordinal, &dims)?,
        alloc(ordinal, &dims)?,
    );
    attention_backward(
        &fused.problem,
        fused.mask.launch_args()?,
        [operand(q)?, operand(k)?, operand(v)?],
        AttentionBackwardInputs {
            d_out: operand(&grad)?,
            out: cuda_storage(&fused.out)?,
            lse: cuda_storage(&fused.lse)?,
        },
        AttentionGradients {
            delta: &mut delta,
            dq: &mut dq,
            dk: &mut dk,
            dv: &mut dv,
        },
    )
    .map_err(kernel_error(ordinal))?;
    Ok([
        heads_view(dq, dims)?,
        heads_view(dk, dims)?,
        heads_view(dv, dims)?,
    ])
}

/// A launcher's error as the tensor error it is for users.
fn kernel_error(ordinal: usize) -> impl Fn(kernels::KernelError) -> RngError {
    move |e| RngError::Tensor(e.into_tensor_error(ordinal))
}

/// The global rows as a device buffer of u64 (held as i64, the 8-byte dtype).
fn upload_rows(rows: &Arc<[u64]>, ordinal: usize) -> Result<Tensor, RngError> {
    let values: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
    Ok(Tensor::from_vec(
        values,
        &[rows.len()],
        Device::Cuda(ordinal),
    )?)
}

/// A fused attention's dropout: the reservation (with the generator's device words
/// during a capture), `p` in f32, and the global rows (`None`: entry `b` is row `b`).
pub(crate) struct FusedDropout {
    reserved: Reserved,
    p: f32,
    rows: Option<Arc<[u64]>>,
}

/// The reservation and rows the fused kernel draws from: what `dropout` of `n`
/// probabilities reserves (for [`AttentionDropout::Draw`], through `graph::reserve` as
/// every random op, so within the graph during a capture, and recorded for the audit as
/// `dropout` records it) or the given key and rows (refused during a capture, which
/// would freeze them; `dropout_rows` cannot be captured either, it uploads its mask).
pub(crate) fn reserve_for_fused(
    probs_dims: &[usize],
    inputs: &[&Tensor],
    dropout: Option<AttentionDropout<'_>>,
) -> Result<Option<FusedDropout>, RngError> {
    const OP: &str = "dropout";
    let Some(dropout) = dropout else {
        return Ok(None);
    };
    let n: u64 = probs_dims.iter().map(|&d| d as u64).product();
    match dropout {
        AttentionDropout::Draw { p, generator } => {
            let generator = generator_for(OP, inputs[0].device(), Some(generator))?;
            let blocks = crate::increment_for(RandomOp::Dropout, inputs[0].dtype(), n);
            let mut recorder = OpRecorder::begin(OP, inputs);
            let reserved = crate::graph::reserve(OP, &generator, blocks)?;
            recorder.rng(RngRecord {
                device: inputs[0].device(),
                seed: reserved.key.seed,
                offset: reserved.key.offset,
                blocks,
            });
            recorder.finish(inputs[0]);
            Ok(Some(FusedDropout {
                reserved,
                p: probability(OP, p)?,
                rows: None,
            }))
        }
        AttentionDropout::Rows {
            p,
            key,
            batch_rows,
            rows,
        } => {
            crate::graph::refuse_replay_in_capture("causal_attention", inputs[0].device())?;
            let identity = batch_rows == rows.len() as u64
                && rows.iter().enumerate().all(|(i, &r)| r == i as u64);
            Ok(Some(FusedDropout {
                reserved: Reserved::eager(key),
                p: probability(OP, p)?,
                rows: (!identity).then(|| Arc::from(rows)),
            }))
        }
    }
}
