//! Launching the fused causal attention (`cuda/attention.cu`): the forward, and the
//! backward's three kernels (the row sums `delta`, then dQ, then dK and dV).
//!
//! These launchers take buffers and strides, as the random kernels' do; rng-gen's
//! `causal_attention` is the tensor op on top (it reserves the dropout stream, checks
//! the tensors and chooses between this and the unfused path). Every launch checks that
//! the largest element each operand's strides reach is inside its buffer, so a wrong
//! stride is an error here, never an out-of-bounds read on the device.
//!
//! The kernels that draw the dropout mask (the forward, dQ, dK and dV) can be captured
//! into a CUDA graph as dropout's kernels can ([`super::Philox::Graphed`]): given the
//! generator's device words, they read the seed and base offset there and take the
//! problem's `offset` as the reservation's place within the graph, so replays draw fresh
//! masks instead of the one frozen at capture.

use cuda_runtime::module_cache;
use cudarc::driver::{CudaView, DeviceRepr, LaunchConfig, PushKernelArg};
use tensor_core::cuda::CudaStorage;
use tensor_core::{DType, TensorError};

use super::{check_words, launch_failed, same_device};
use crate::error::{KernelError, Result};
use crate::nvrtc::ATTENTION_SOURCE;

/// The widest head `attention.cu` handles (`DITTO_ATTENTION_MAX_D`).
pub const ATTENTION_MAX_HEAD_WIDTH: u64 = 64;
/// Query or key rows per block, one thread each (`DITTO_ATTENTION_TILE`).
const TILE: u64 = 32;

/// The problem, as `attention.cu`'s `DittoAttention` (same fields, same order).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionProblem {
    /// Batch entries in this call.
    pub batch: u64,
    /// Heads.
    pub heads: u64,
    /// Tokens (queries and keys).
    pub t: u64,
    /// Head width.
    pub d: u64,
    /// The dropout reservation's Philox key (read from the device words instead when a
    /// launch has them).
    pub seed: u64,
    /// The dropout reservation's first block; with device words, blocks from the
    /// graph's base offset (the reservation's `intra_offset`).
    pub offset: u64,
    /// The scale of the scores `q . k`.
    pub scale: f32,
    /// The drop probability.
    pub p: f32,
    /// `1 / (1 - p)`, as dropout computes it on the host.
    pub keep_scale: f32,
    /// Non-zero when the probabilities are dropped out (training).
    pub dropout: i32,
}

// SAFETY: a `#[repr(C)]` struct of plain numbers, laid out as the kernel's struct.
unsafe impl DeviceRepr for AttentionProblem {}

/// Element strides of a `[batch, heads, t, d]` operand whose last dimension is
/// contiguous (`DittoHeadStrides`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadStrides {
    /// Between batch entries.
    pub b: u64,
    /// Between heads.
    pub h: u64,
    /// Between tokens.
    pub t: u64,
}

// SAFETY: a `#[repr(C)]` struct of three u64, as the kernel's.
unsafe impl DeviceRepr for HeadStrides {}

/// One `[batch, heads, t, d]` f32 operand: its buffer, the element of `(0, 0, 0, 0)`
/// and its strides.
#[derive(Clone, Copy, Debug)]
pub struct HeadOperand<'a> {
    /// The buffer.
    pub storage: &'a CudaStorage,
    /// Element index of `(0, 0, 0, 0)`.
    pub offset: usize,
    /// The strides of the first three dimensions.
    pub strides: HeadStrides,
}

/// The forward's outputs: `out` `[batch, t, heads, d]` and `lse` `[batch, heads, t]`.
#[derive(Debug)]
pub struct AttentionOutputs<'a> {
    /// The attention's output, merged heads.
    pub out: &'a mut CudaStorage,
    /// Each query row's log-sum-exp, for backward.
    pub lse: &'a mut CudaStorage,
}

/// Where the dropout's stream comes from: the problem's `(seed, offset)` (an eager
/// launch, `words: None`), or for a launch captured into a CUDA graph the generator's
/// device words `{seed, base offset}` plus the problem's `offset`; and the global rows.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttentionStream<'a> {
    /// The generator's device words (two 8-byte words, [`super::Philox::Graphed`]).
    pub words: Option<&'a CudaStorage>,
    /// `batch` u64 global row numbers (the masks' batch rows); `None`: entry `b` is row
    /// `b`.
    pub rows: Option<&'a CudaStorage>,
}

/// Queues the forward: `out = dropout(causal_softmax(q k^T scale)) v` and the rows'
/// log-sum-exp, the mask drawn from `stream`.
pub fn attention_forward(
    problem: &AttentionProblem,
    stream: AttentionStream<'_>,
    [q, k, v]: [HeadOperand<'_>; 3],
    outputs: AttentionOutputs<'_>,
) -> Result<()> {
    const NAME: &str = "ditto_attention_forward_f32";
    let elems = check_problem(NAME, problem)?;
    let rows_len = problem.batch * problem.heads * problem.t;
    check_operands(NAME, problem, &[q, k, v])?;
    check_stream(NAME, problem, stream, q.storage)?;
    check_output(NAME, "out", outputs.out, elems, q.storage)?;
    check_output(NAME, "lse", outputs.lse, rows_len, q.storage)?;
    let ordinal = q.storage.ordinal();
    let func = module_cache::function(ordinal, &ATTENTION_SOURCE, NAME)?;
    let queue = outputs.out.stream()?;
    let views = [q, k, v].map(view);
    let strides = [q, k, v].map(|o| o.strides);
    let pointers = stream_views(stream);
    let mut args = queue.launch_builder(&func);
    args.arg(problem);
    push_pointers(&mut args, &pointers);
    for (view, strides) in views.iter().zip(&strides) {
        args.arg(view).arg(strides);
    }
    args.arg(outputs.out.bytes_mut())
        .arg(outputs.lse.bytes_mut());
    // SAFETY: matches `ditto_attention_forward_f32(DittoAttention, const u64* philox, const
    // u64* rows, const float* q, DittoHeadStrides, k, strides, v, strides, float* out,
    // float* lse)`; every element the strides reach, the words, the rows and both
    // outputs were checked above.
    unsafe { args.launch(tiles(problem)) }.map_err(launch_failed(ordinal, NAME))?;
    Ok(())
}

/// What the backward reads besides q, k, v: the upstream gradient `d_out` (a head
/// operand), and the forward's `out` and `lse`.
#[derive(Clone, Copy, Debug)]
pub struct AttentionBackwardInputs<'a> {
    /// The gradient of the forward's output.
    pub d_out: HeadOperand<'a>,
    /// The forward's output, `[batch, t, heads, d]`.
    pub out: &'a CudaStorage,
    /// The forward's log-sum-exp, `[batch, heads, t]`.
    pub lse: &'a CudaStorage,
}

/// The backward's outputs, each `[batch, t, heads, d]`, and `delta` (`[batch, heads,
/// t]` f32 scratch).
#[derive(Debug)]
pub struct AttentionGradients<'a> {
    /// The rows' `dO . O`, scratch.
    pub delta: &'a mut CudaStorage,
    /// The gradient of q.
    pub dq: &'a mut CudaStorage,
    /// The gradient of k.
    pub dk: &'a mut CudaStorage,
    /// The gradient of v.
    pub dv: &'a mut CudaStorage,
}

/// Queues the backward of [`attention_forward`] with the same problem and stream (the
/// backward regenerates the forward's mask).
pub fn attention_backward(
    problem: &AttentionProblem,
    stream: AttentionStream<'_>,
    [q, k, v]: [HeadOperand<'_>; 3],
    inputs: AttentionBackwardInputs<'_>,
    grads: AttentionGradients<'_>,
) -> Result<()> {
    const NAME: &str = "causal attention backward";
    let elems = check_problem(NAME, problem)?;
    let rows_len = problem.batch * problem.heads * problem.t;
    check_operands(NAME, problem, &[q, k, v, inputs.d_out])?;
    check_stream(NAME, problem, stream, q.storage)?;
    check_output(NAME, "out", inputs.out, elems, q.storage)?;
    check_output(NAME, "lse", inputs.lse, rows_len, q.storage)?;
    check_output(NAME, "delta", grads.delta, rows_len, q.storage)?;
    for (what, grad) in [("dq", &*grads.dq), ("dk", &*grads.dk), ("dv", &*grads.dv)] {
        check_output(NAME, what, grad, elems, q.storage)?;
    }
    let ordinal = q.storage.ordinal();
    let queue = grads.dq.stream()?;
    let d_out = view(inputs.d_out);

    const ROW_DOT: &str = "ditto_attention_row_dot_f32";
    let func = module_cache::function(ordinal, &ATTENTION_SOURCE, ROW_DOT)?;
    let mut args = queue.launch_builder(&func);
    args.arg(problem)
        .arg(&d_out)
        .arg(&inputs.d_out.strides)
        .arg(inputs.out.bytes())
        .arg(grads.delta.bytes_mut());
    let blocks = rows_len.div_ceil(256).min(65_535) as u32;
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: matches `ditto_attention_row_dot_f32(DittoAttention, const float* d_out,
    // DittoHeadStrides, const float* out, float* delta)`, sizes checked above.
    unsafe { args.launch(cfg) }.map_err(launch_failed(ordinal, ROW_DOT))?;

    let views = [q, k, v].map(view);
    let strides = [q, k, v].map(|o| o.strides);
    let pointers = stream_views(stream);
    for (name, outputs) in [
        ("ditto_attention_backward_dq_f32", 1),
        ("ditto_attention_backward_dkv_f32", 2),
    ] {
        let func = module_cache::function(ordinal, &ATTENTION_SOURCE, name)?;
        let mut args = queue.launch_builder(&func);
        args.arg(problem);
        push_pointers(&mut args, &pointers);
        for (view, strides) in views.iter().zip(&strides) {
            args.arg(view).arg(strides);
        }
        args.arg(&d_out)
            .arg(&inputs.d_out.strides)
            .arg(inputs.lse.bytes())
            .arg(grads.delta.bytes());
        if outputs == 1 {
            args.arg(grads.dq.bytes_mut());
        } else {
            args.arg(grads.dk.bytes_mut()).arg(grads.dv.bytes_mut());
        }
        // SAFETY: matches `ditto_attention_backward_dq_f32(DittoAttention, philox, rows,
        // q, strides, k, strides, v, strides, d_out, strides, lse, delta, float* dq)` and
        // `..._dkv_f32(..., float* dk, float* dv)`; every buffer was checked above.
        unsafe { args.launch(tiles(problem)) }.map_err(launch_failed(ordinal, name))?;
    }
    Ok(())
}

/// The device pointer of an operand's `(0, 0, 0, 0)`.
fn view(operand: HeadOperand<'_>) -> CudaView<'_, u8> {
    operand.storage.bytes().slice(operand.offset * 4..)
}

/// The device pointers of a stream's words and rows, in the kernels' argument order.
fn stream_views(stream: AttentionStream<'_>) -> [Option<CudaView<'_, u8>>; 2] {
    [stream.words, stream.rows].map(|b| b.map(|b| b.bytes().slice(0..)))
}

/// Pushes each optional pointer, a null pointer (a 64-bit zero) for one left out.
fn push_pointers<'a>(
    args: &mut cudarc::driver::LaunchArgs<'a>,
    pointers: &'a [Option<CudaView<'a, u8>>],
) {
    const NULL: u64 = 0;
    for pointer in pointers {
        match pointer {
            Some(view) => args.arg(view),
            None => args.arg(&NULL),
        };
    }
}

/// A block per (batch entry, head) and tile of rows, a thread per row.
fn tiles(problem: &AttentionProblem) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            (problem.batch * problem.heads) as u32,
            problem.t.div_ceil(TILE) as u32,
            1,
        ),
        block_dim: (TILE as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn invalid(op: &str, message: String) -> KernelError {
    KernelError::InvalidArgument {
        op: "attention",
        message: format!("{op}: {message}"),
    }
}

/// Checks the sizes against the kernels' limits; returns the output's element count.
fn check_problem(op: &str, p: &AttentionProblem) -> Result<u64> {
    if p.d == 0 || p.d > ATTENTION_MAX_HEAD_WIDTH {
        return Err(invalid(
            op,
            format!(
                "head width {} is outside the fused kernel's 1..={ATTENTION_MAX_HEAD_WIDTH}",
                p.d
            ),
        ));
    }
    let blocks = p.batch.checked_mul(p.heads);
    if p.batch == 0
        || p.heads == 0
        || p.t == 0
        || blocks.is_none_or(|b| b > u64::from(u32::MAX >> 1))
    {
        return Err(invalid(
            op,
            format!(
                "batch {} x heads {} x t {} must be non-empty, with batch x heads below 2^31",
                p.batch, p.heads, p.t
            ),
        ));
    }
    if p.t.div_ceil(TILE) > 65_535 {
        return Err(invalid(
            op,
            format!("t = {} is above the grid's 65535 tiles of {TILE}", p.t),
        ));
    }
    [p.batch, p.heads, p.t, p.d]
        .into_iter()
        .try_fold(1u64, u64::checked_mul)
        .ok_or_else(|| invalid(op, "the element count overflows u64".into()))
}

/// Errors unless every operand is f32 on the first one's device and every element its
/// strides reach is inside its buffer.
fn check_operands(op: &str, p: &AttentionProblem, operands: &[HeadOperand<'_>]) -> Result<()> {
    for operand in operands {
        same_device("attention", operands[0].storage, operand.storage)?;
        let dtype = operand.storage.dtype();
        if dtype != DType::F32 {
            return Err(TensorError::UnsupportedDType {
                op: "attention",
                dtype,
                supported: "f32",
            }
            .into());
        }
        let s = operand.strides;
        let last = [(p.batch, s.b), (p.heads, s.h), (p.t, s.t), (p.d, 1)]
            .into_iter()
            .try_fold(operand.offset as u64, |end, (n, stride)| {
                (n - 1).checked_mul(stride).and_then(|x| end.checked_add(x))
            });
        if last.is_none_or(|last| last >= operand.storage.len() as u64) {
            return Err(invalid(
                op,
                format!(
                    "an operand's strides {s:?} from element {} reach past its {} elements",
                    operand.offset,
                    operand.storage.len()
                ),
            ));
        }
    }
    Ok(())
}

/// Errors unless the stream's words (when given) are two 8-byte words and its rows
/// (when given) `batch` u64, each on `first`'s device.
fn check_stream(
    op: &str,
    p: &AttentionProblem,
    stream: AttentionStream<'_>,
    first: &CudaStorage,
) -> Result<()> {
    if let Some(words) = stream.words {
        check_words(words)?;
        same_device("attention", first, words)?;
    }
    let Some(rows) = stream.rows else {
        return Ok(());
    };
    same_device("attention", first, rows)?;
    if rows.dtype().size_in_bytes() != 8 || (rows.len() as u64) < p.batch {
        return Err(invalid(
            op,
            format!(
                "rows must be {} u64 row numbers, got {} {}",
                p.batch,
                rows.len(),
                rows.dtype()
            ),
        ));
    }
    Ok(())
}

/// Errors unless `buffer` is f32, on `first`'s device, and holds `len` elements.
fn check_output(
    op: &str,
    what: &str,
    buffer: &CudaStorage,
    len: u64,
    first: &CudaStorage,
) -> Result<()> {
    same_device("attention", first, buffer)?;
    if buffer.dtype() != DType::F32 || (buffer.len() as u64) < len {
        return Err(invalid(
            op,
            format!(
                "{what} must hold {len} f32, got {} {}",
                buffer.len(),
                buffer.dtype()
            ),
        ));
    }
    Ok(())
}
