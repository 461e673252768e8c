//! `causal_attention`: GPT's causal self-attention with attention dropout, `y =
//! dropout(causal_softmax(q k^T scale)) v`, and its backward.
//!
//! Two paths compute it:
//! - **unfused** ([`causal_attention_unfused`]): batched `matmul`, `causal_softmax`,
//!   `dropout` of the `[batch, heads, t, t]` probabilities, `matmul`. Every step is a
//!   tensor op with its documented order, so this path gives the CPU's bits wherever the
//!   ops do (portable arithmetic on CUDA). It keeps the probabilities for backward.
//! - **fused** (CUDA, f32, default arithmetic, head width up to 64): one kernel in
//!   FlashAttention-2's tiling (`crates/kernels/cuda/attention.cu`), no `[t, t]` tensor,
//!   the rows' log-sum-exp kept for a backward that recomputes the probabilities, and
//!   dK / dV summed without atomics.
//!
//! [`causal_attention`] takes the fused path where it can and the unfused one otherwise
//! (the CPU, f64, portable arithmetic, wider heads); inside a CUDA graph capture too, as
//! dropout, it draws a fresh mask on every replay ([`crate::graph`]). Both draw the
//! same dropout masks: element `(b, h, i, j)` of the probabilities is element `((row(b) *
//! heads + h) * t + i) * t + j` of the dropout op's stream at the reservation, where
//! `row(b)` is the entry's row in the global batch (docs/contract.md §5.11). The fused
//! path reserves exactly what `dropout` on the probabilities reserves, so a run's
//! generator states, and every later draw, are the same on both paths. Values agree to
//! rounding (the fused sums run in another order); the tests bound the difference.
//!
//! Inside a bf16 autocast scope ([`tensor_core::autocast`]) both paths compute the
//! attention of `q`, `k` and `v` rounded to bf16, in f32: products of bf16 values,
//! summed in f32, as a bf16 flash kernel accumulates. The probabilities stay f32 on both
//! paths (the op suspends autocast inside, so the unfused path's matmuls do not round
//! them), so the two paths keep computing one function. The backward runs in f32 from
//! the rounded operands, and the rounding's gradient is the identity, as a cast's is.

use tensor_core::{DType, Tensor, TensorError};

use super::args::{generator_for, probability};
use super::dropout::{dropout_backward, dropout_rows, dropout_with_mask, AttentionDropout};
use crate::{DropoutState, RngError};

/// What [`causal_attention_backward`] needs of a forward.
#[derive(Debug)]
pub struct AttentionSaved {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: f64,
    path: SavedPath,
}

#[derive(Debug)]
enum SavedPath {
    /// The probabilities before and after dropout, and dropout's state (training).
    Unfused {
        probs: Tensor,
        dropped: Tensor,
        dropout: Option<DropoutState>,
    },
    /// The output `[batch, t, heads, d]`, the rows' log-sum-exp, the kernel's problem
    /// and the global rows on the device.
    #[cfg(feature = "cuda")]
    Fused(super::attention_cuda::Fused),
}

impl AttentionSaved {
    #[cfg(feature = "cuda")]
    pub(crate) fn fused(
        [q, k, v]: [Tensor; 3],
        scale: f64,
        fused: super::attention_cuda::Fused,
    ) -> Self {
        AttentionSaved {
            q,
            k,
            v,
            scale,
            path: SavedPath::Fused(fused),
        }
    }

    /// True when the forward ran the fused kernel.
    #[must_use]
    pub fn is_fused(&self) -> bool {
        !matches!(self.path, SavedPath::Unfused { .. })
    }
}

/// `dropout(causal_softmax(q k^T, scale)) v` for `q`, `k`, `v` `[batch, heads, t, d]`
/// of one float dtype on one device, returning `y` `[batch, heads, t, d]` and what
/// backward needs. Fused on CUDA where it can be (module docs), unfused elsewhere; the
/// same dropout masks either way.
#[track_caller]
pub fn causal_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    dropout: Option<AttentionDropout<'_>>,
) -> Result<(Tensor, AttentionSaved), RngError> {
    attend([q, k, v], scale, dropout, true)
}

/// [`causal_attention`] by the unfused tensor ops on any device: the reference the fused
/// kernel is checked against, and the path whose bits portable arithmetic fixes.
#[track_caller]
pub fn causal_attention_unfused(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    dropout: Option<AttentionDropout<'_>>,
) -> Result<(Tensor, AttentionSaved), RngError> {
    attend([q, k, v], scale, dropout, false)
}

/// Both entry points: checks, rounds the operands to bf16 inside a bf16 autocast scope
/// (module docs), then runs the fused path when `may_fuse` and it can, else the unfused.
fn attend(
    qkv: [&Tensor; 3],
    scale: f64,
    dropout: Option<AttentionDropout<'_>>,
    may_fuse: bool,
) -> Result<(Tensor, AttentionSaved), RngError> {
    let [q, k, v] = qkv;
    check(q, k, v, dropout.as_ref())?;
    let [q, k, v] = qkv.map(tensor_core::autocast_operand);
    let (q, k, v) = (q?, k?, v?);
    let _f32 = tensor_core::autocast_disabled();
    #[cfg(feature = "cuda")]
    if may_fuse && super::attention_cuda::can_fuse(&q) {
        let (y, qkv, fused) = super::attention_cuda::forward(&q, &k, &v, scale, dropout)?;
        return Ok((y, AttentionSaved::fused(qkv, scale, fused)));
    }
    #[cfg(not(feature = "cuda"))]
    let _ = may_fuse;
    unfused([&q, &k, &v], scale, dropout)
}

/// The unfused path on operands already checked (and rounded, under autocast).
fn unfused(
    [q, k, v]: [&Tensor; 3],
    scale: f64,
    dropout: Option<AttentionDropout<'_>>,
) -> Result<(Tensor, AttentionSaved), RngError> {
    let probs = q.matmul(&k.transpose(2, 3)?)?.causal_softmax(scale)?;
    let (dropped, state) = match dropout {
        None => (probs.clone(), None),
        Some(AttentionDropout::Draw { p, generator }) => {
            let (d, s) = dropout_with_mask(&probs, p, true, Some(generator))?;
            (d, Some(s))
        }
        Some(AttentionDropout::Rows {
            p,
            key,
            batch_rows,
            rows,
        }) => {
            let (d, s) = dropout_rows(&probs, p, key, batch_rows, rows)?;
            (d, Some(s))
        }
    };
    let y = dropped.matmul(v)?;
    let saved = AttentionSaved {
        q: q.clone(),
        k: k.clone(),
        v: v.clone(),
        scale,
        path: SavedPath::Unfused {
            probs,
            dropped,
            dropout: state,
        },
    };
    Ok((y, saved))
}

/// The gradients `[dq, dk, dv]` (each `[batch, heads, t, d]`) of [`causal_attention`]
/// given the gradient `grad` of its output.
#[track_caller]
pub fn causal_attention_backward(
    grad: &Tensor,
    saved: AttentionSaved,
) -> Result<[Tensor; 3], RngError> {
    const OP: &str = "causal_attention_backward";
    if grad.dims() != saved.q.dims() || grad.dtype() != saved.q.dtype() {
        return Err(RngError::InvalidAttention {
            op: OP,
            reason: format!(
                "the gradient must be the output's {:?} {}, got {:?} {}",
                saved.q.dims(),
                saved.q.dtype(),
                grad.dims(),
                grad.dtype()
            ),
        });
    }
    let AttentionSaved {
        q,
        k,
        v,
        scale,
        path,
    } = saved;
    // In f32 from the saved (rounded, under autocast) operands: module docs.
    let _f32 = tensor_core::autocast_disabled();
    match path {
        SavedPath::Unfused {
            probs,
            dropped,
            dropout,
        } => {
            let d_dropped = grad.matmul(&v.transpose(2, 3)?)?;
            let dv = dropped.transpose(2, 3)?.matmul(grad)?;
            let d_probs = match &dropout {
                Some(state) => dropout_backward(&d_dropped, state)?,
                None => d_dropped,
            };
            let d_scores = Tensor::causal_softmax_backward(&d_probs, &probs, scale)?;
            let dq = d_scores.matmul(&k)?;
            let dk = d_scores.transpose(2, 3)?.matmul(&q)?;
            Ok([dq, dk, dv])
        }
        #[cfg(feature = "cuda")]
        SavedPath::Fused(fused) => super::attention_cuda::backward(grad, [&q, &k, &v], &fused),
    }
}

/// Errors unless q, k, v are `[batch, heads, t, d]` of one float dtype and device, and
/// the dropout's probability and rows fit.
fn check(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    dropout: Option<&AttentionDropout<'_>>,
) -> Result<(), RngError> {
    const OP: &str = "causal_attention";
    let bad = |reason: String| Err(RngError::InvalidAttention { op: OP, reason });
    if q.rank() != 4 || k.dims() != q.dims() || v.dims() != q.dims() {
        return bad(format!(
            "q, k and v must be [batch, heads, t, d] of equal dims, got {:?}, {:?} and {:?}",
            q.dims(),
            k.dims(),
            v.dims()
        ));
    }
    for x in [k, v] {
        q.require_compatible(OP, x)?;
    }
    match q.dtype() {
        DType::F32 | DType::F64 => {}
        dtype => {
            return Err(TensorError::UnsupportedDType {
                op: OP,
                dtype,
                supported: "f32, f64",
            }
            .into())
        }
    }
    match dropout {
        None => {}
        Some(AttentionDropout::Draw { p, generator }) => {
            probability(OP, *p)?;
            generator_for(OP, q.device(), Some(generator))?;
        }
        Some(AttentionDropout::Rows {
            p,
            batch_rows,
            rows,
            ..
        }) => {
            probability(OP, *p)?;
            if rows.len() != q.dims()[0] {
                return bad(format!(
                    "{} global rows for a batch of {}",
                    rows.len(),
                    q.dims()[0]
                ));
            }
            if let Some(row) = rows.iter().find(|&&r| r >= *batch_rows) {
                return bad(format!("row {row} is not in the batch's 0..{batch_rows}"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use tensor_core::{Device, Tensor};

    use crate::{Generator, Key};

    use super::*;

    /// docs/contract.md §5.11's test vector: seed 42, offset 0, `p = 0.5`, 2 heads,
    /// `t = 4`, the entry at global row 1 of 2: the keep bits of head 1's causal rows.
    #[test]
    fn the_contract_test_vector() {
        let (heads, t) = (2, 4);
        let q =
            Tensor::from_vec(vec![0.25f32; heads * t * t], &[1, heads, t, t], Device::Cpu).unwrap();
        let mut eye = vec![0.0f32; heads * t * t];
        for (row, chunk) in eye.chunks_mut(t).enumerate() {
            chunk[row % t] = 1.0;
        }
        let v = Tensor::from_vec(eye, &[1, heads, t, t], Device::Cpu).unwrap();
        let dropout = AttentionDropout::Rows {
            p: 0.5,
            key: Key::new(42),
            batch_rows: 2,
            rows: &[1],
        };
        let (y, _) = causal_attention(&q, &q, &v, 1.0, Some(dropout)).unwrap();
        let y = y.to_vec::<f32>().unwrap();
        let kept: Vec<String> = (0..t)
            .map(|i| {
                (0..=i)
                    .map(|j| if y[(t + i) * t + j] != 0.0 { '1' } else { '0' })
                    .collect()
            })
            .collect();
        assert_eq!(kept, ["0", "00", "010", "0110"]);
        // The same bits from the stream's words: element e = ((1 * 2 + 1) * 4 + i) * 4 + j,
        // kept iff its f32 uniform `(w & 0xFFFFFF) * 2^-24` is >= 0.5: iff bit 23 is set.
        for (i, row) in kept.iter().enumerate() {
            for (j, bit) in row.chars().enumerate() {
                let e = ((2 + 1) * t + i) * t + j;
                let word = crate::stream::philox::word_at(42, 0, e as u64);
                assert_eq!(bit == '1', (word >> 23) & 1 == 1, "element {e}");
            }
        }
    }

    /// Under bf16 autocast the op is the f32 attention of the bf16-rounded operands,
    /// forward and backward, and the scope it was called in is back afterwards.
    #[test]
    fn bf16_autocast_is_the_attention_of_rounded_operands() {
        let dims = [2, 2, 5, 3];
        let tensor = |salt: f32| {
            let n: usize = dims.iter().product();
            let v = (0..n)
                .map(|i| (i as f32 * 0.731 + salt).sin() * 1.001)
                .collect();
            Tensor::from_vec(v, &dims, Device::Cpu).unwrap()
        };
        let [q, k, v, dy] = [0.1, 0.2, 0.3, 0.4].map(tensor);
        let run = |qkv: [&Tensor; 3]| {
            let g = Generator::from_key(Device::Cpu, Key::new(5));
            let (y, saved) = causal_attention(
                qkv[0],
                qkv[1],
                qkv[2],
                0.5,
                Some(AttentionDropout::Draw {
                    p: 0.2,
                    generator: &g,
                }),
            )
            .unwrap();
            let grads = causal_attention_backward(&dy, saved).unwrap();
            let bits = |t: &Tensor| t.to_vec::<f32>().unwrap();
            (bits(&y), grads.iter().map(bits).collect::<Vec<_>>())
        };
        let rounded = [&q, &k, &v].map(|t| t.round_to_bf16().unwrap());
        let want = run([&rounded[0], &rounded[1], &rounded[2]]);
        assert_ne!(
            run([&q, &k, &v]),
            want,
            "the operands have bits below bf16's"
        );
        let _bf16 = tensor_core::autocast(DType::BF16).unwrap();
        assert_eq!(run([&q, &k, &v]), want);
        assert_eq!(tensor_core::get_autocast_dtype(), Some(DType::BF16));
    }
}
