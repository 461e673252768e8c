//! `CausalSelfAttention`: GPT-2's multi-head self-attention with a causal mask, nanoGPT's
//! layout and names (`c_attn`, `c_proj`, `attn_dropout`, `resid_dropout`).

use rng_gen::{AttentionDropout, AttentionSaved, Generator};
use tensor_core::Tensor;

use super::block::three_dims;
use crate::layers::dropout::MaskSource;
use crate::{Dropout, GlobalRows, Linear, Module, NnError, Parameter, Result};

/// What backward needs of a training forward: the attention op's own state (the heads'
/// queries, keys and values, and the probabilities or their log-sum-exp) and the input
/// dims.
#[derive(Debug)]
struct Saved {
    attention: AttentionSaved,
    dims: [usize; 3],
}

/// Multi-head causal self-attention over `[batch, t, width]`:
///
/// ```text
/// q, k, v = split(c_attn(x))                      width -> 3 width, then heads
/// p = causal_softmax(q k^T, scale 1/sqrt(head width))    [batch, heads, t, t]
/// y = c_proj(merge_heads(attn_dropout(p) v))
/// out = resid_dropout(y)
/// ```
///
/// The middle line is [`rng_gen::causal_attention`]: one fused kernel on CUDA in default
/// arithmetic, the unfused tensor ops elsewhere. The attention dropout masks the
/// probabilities `[batch, heads, t, t]`, one Philox mask per global batch like any
/// [`Dropout`]: its rows are the batch's rows, so a data parallel rank draws each of its
/// sequences' masks at the sequence's global position, and the fused and unfused paths
/// draw the same mask.
#[derive(Debug)]
pub struct CausalSelfAttention {
    pub(super) c_attn: Linear,
    pub(super) c_proj: Linear,
    attn_dropout: Dropout,
    resid_dropout: Dropout,
    pub(super) heads: usize,
    saved: Option<Saved>,
}

impl CausalSelfAttention {
    /// The layer from its two projections (`c_attn`: `[3 width, width]`, `c_proj`:
    /// `[width, width]`, as PyTorch's `Linear` stores them), `heads` heads (dividing
    /// the width), and dropout `p` on the probabilities and on the output, drawn from
    /// `dropout_generator`.
    pub fn new(
        c_attn: Linear,
        c_proj: Linear,
        heads: usize,
        p: f64,
        dropout_generator: &Generator,
    ) -> Result<Self> {
        let width = c_proj.weight().value.dims()[0];
        let attn_dims = c_attn.weight().value.dims().to_vec();
        let proj_dims = c_proj.weight().value.dims().to_vec();
        if heads == 0 || !width.is_multiple_of(heads) {
            return Err(NnError::invalid(
                "CausalSelfAttention::new",
                format!("{heads} heads do not divide the width {width}; expected a divisor of it"),
            ));
        }
        if attn_dims != [3 * width, width] || proj_dims != [width, width] {
            return Err(NnError::invalid(
                "CausalSelfAttention::new",
                format!(
                    "c_attn must be [3 width, width] and c_proj [width, width], got {attn_dims:?} and {proj_dims:?}"
                ),
            ));
        }
        Ok(CausalSelfAttention {
            c_attn,
            c_proj,
            attn_dropout: Dropout::new(p, dropout_generator)?,
            resid_dropout: Dropout::new(p, dropout_generator)?,
            heads,
            saved: None,
        })
    }

    /// `[batch * t, width]` rows of one of q, k, v as `[batch, heads, t, head width]`
    /// (a copy to `[batch, t, heads, head width]`, then a transposed view).
    fn heads_of(&self, rows: &Tensor, [b, t, c]: [usize; 3]) -> Result<Tensor> {
        let d = c / self.heads;
        Ok(rows.reshape(&[b, t, self.heads, d])?.transpose(1, 2)?)
    }

    /// `[batch, heads, t, head width]` back to `[batch * t, width]` rows.
    fn merge_heads(y: &Tensor, [b, t, c]: [usize; 3]) -> Result<Tensor> {
        Ok(y.transpose(1, 2)?.reshape(&[b * t, c])?)
    }
}

impl Module for CausalSelfAttention {
    fn forward(&mut self, input: &Tensor, train: bool) -> Result<Tensor> {
        let dims @ [b, t, c] = three_dims("CausalSelfAttention::forward", input)?;
        let qkv = self.c_attn.forward(&input.reshape(&[b * t, c])?, train)?;
        let q = self.heads_of(&qkv.narrow(1, 0, c)?, dims)?;
        let k = self.heads_of(&qkv.narrow(1, c, c)?, dims)?;
        let v = self.heads_of(&qkv.narrow(1, 2 * c, c)?, dims)?;
        let scale = 1.0 / ((c / self.heads) as f64).sqrt();
        let source = match train {
            true => Some(
                self.attn_dropout
                    .mask_source((self.heads * t * t) as u64, q.dtype())?,
            ),
            false => None,
        };
        let p = self.attn_dropout.p();
        let dropout = source.as_ref().map(|source| match source {
            MaskSource::Draw => AttentionDropout::Draw {
                p,
                generator: self.attn_dropout.generator(),
            },
            MaskSource::Rows { key, global } => AttentionDropout::Rows {
                p,
                key: *key,
                batch_rows: global.batch_rows(),
                rows: global.rows(),
            },
        });
        let (y, attention) = rng_gen::causal_attention(&q, &k, &v, scale, dropout)?;
        let y = Self::merge_heads(&y, dims)?;
        let out = self.c_proj.forward(&y, train)?.reshape(&[b, t, c])?;
        let out = self.resid_dropout.forward(&out, train)?;
        self.saved = train.then_some(Saved { attention, dims });
        Ok(out)
    }

    fn backward(&mut self, grad_output: &Tensor) -> Result<Tensor> {
        let Saved { attention, dims } =
            self.saved.take().ok_or(NnError::BackwardWithoutForward {
                layer: "CausalSelfAttention",
            })?;
        let [b, t, c] = dims;
        let g = self.resid_dropout.backward(grad_output)?;
        let g = self.c_proj.backward(&g.reshape(&[b * t, c])?)?;
        let dy = self.heads_of(&g, dims)?;
        let [dq, dk, dv] = rng_gen::causal_attention_backward(&dy, attention)?;
        let rows = |h: &Tensor| Self::merge_heads(h, dims);
        let d_qkv = Tensor::cat(&[rows(&dq)?, rows(&dk)?, rows(&dv)?], 1)?;
        Ok(self.c_attn.backward(&d_qkv)?.reshape(&[b, t, c])?)
    }

    fn set_global_rows(&mut self, rows: Option<&GlobalRows>) {
        self.attn_dropout.set_global_rows(rows);
        self.resid_dropout.set_global_rows(rows);
    }

    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        self.c_attn.visit_parameters(&format!("{prefix}c_attn."), f);
        self.c_proj.visit_parameters(&format!("{prefix}c_proj."), f);
    }

    fn visit_parameters_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        self.c_attn
            .visit_parameters_mut(&format!("{prefix}c_attn."), f);
        self.c_proj
            .visit_parameters_mut(&format!("{prefix}c_proj."), f);
    }
}
