//! Generation one token at a time with a key-value cache: each new token runs the
//! model on its own row, reusing the keys and values every earlier position left in
//! the cache, instead of running the whole context again (nanoGPT's `generate`).
//!
//! A sequence's computation is fixed by its tokens alone: the prompt is one
//! [`prefill`](Gpt::prefill) (the full forward's ops on those rows, keeping keys and
//! values), then each token one single-row step; past the position table
//! (`block_size` tokens) the context slides as nanoGPT's `generate` crops it: the cache
//! is prefilled again from the last `block_size - 1` tokens before the next one. So
//! nothing depends on a batch it shares (rows of different requests never meet in one
//! op), on the thread count (each op's bits are thread-independent), or on where a
//! generation was interrupted (continuing prefills the prompt and steps through the
//! same tokens). A single-row step is not bit-identical to the full forward of the same
//! tokens: its attention is a `[1, T]` softmax (log-softmax, then exp) where the full
//! forward runs a causal `[t, t]` one, and its products have other shapes; the two
//! agree to float rounding (tests hold them within 1e-4).

use tensor_core::{Device, Tensor};

use super::{CausalSelfAttention, Gpt};
use crate::{Module, NnError, Result};

/// One block's keys and values of the tokens fed so far, `[heads, tokens, head width]`.
#[derive(Clone, Debug, Default)]
pub struct LayerCache {
    k: Option<Tensor>,
    v: Option<Tensor>,
}

/// The cache of one sequence: every block's keys and values, and the tokens fed.
#[derive(Clone, Debug, Default)]
pub struct KvCache {
    layers: Vec<LayerCache>,
    tokens: Vec<u8>,
}

impl KvCache {
    /// An empty cache.
    #[must_use]
    pub fn new() -> Self {
        KvCache::default()
    }

    /// The tokens whose keys and values the cache holds, in order (at most
    /// `block_size`: the positions they sit at).
    #[must_use]
    pub fn tokens(&self) -> &[u8] {
        &self.tokens
    }
}

impl CausalSelfAttention {
    /// Attention of the new rows `x` (`[n, width]`, already layer-normed) over
    /// themselves and every row in `cache`, which they then join. An empty cache takes
    /// any number of rows, causally masked as the full forward masks them (its
    /// `causal_softmax`); a filled one takes one row, which sees every cached row.
    fn forward_cached(&mut self, x: &Tensor, cache: &mut LayerCache) -> Result<Tensor> {
        let [n, c] = x.dims()[..] else {
            return Err(NnError::invalid(
                "CausalSelfAttention::forward_cached",
                "expected [n, width] rows",
            ));
        };
        let (h, d) = (self.heads, c / self.heads);
        let qkv = self.c_attn.forward(x, false)?;
        // As the training forward's attention op under autocast: q, k, v rounded, the
        // probabilities and their products in f32 (rng_gen::causal_attention's docs).
        let head = |i: usize| -> Result<Tensor> {
            let rows = qkv.narrow(1, i * c, c)?.reshape(&[n, h, d])?;
            Ok(tensor_core::autocast_operand(
                &rows.transpose(0, 1)?.contiguous()?,
            )?)
        };
        let (q, k, v) = (head(0)?, head(1)?, head(2)?);
        let f32_scope = tensor_core::autocast_disabled();
        let scale = 1.0 / (d as f64).sqrt();
        let (k, v, probs) = match (&cache.k, &cache.v) {
            (Some(old_k), Some(old_v)) if n == 1 => {
                let k = Tensor::cat(&[old_k.clone(), k], 1)?;
                let v = Tensor::cat(&[old_v.clone(), v], 1)?;
                let scores = q.matmul(&k.transpose(1, 2)?)?.mul_scalar(scale)?;
                let probs = scores.log_softmax(2)?.exp()?;
                (k, v, probs)
            }
            (None, None) => {
                let probs = q.matmul(&k.transpose(1, 2)?)?.causal_softmax(scale)?;
                (k, v, probs)
            }
            _ => {
                return Err(NnError::invalid(
                    "CausalSelfAttention::forward_cached",
                    format!("{n} rows after cached ones; expected one row, or an empty cache"),
                ))
            }
        };
        let y = probs.matmul(&v)?.transpose(0, 1)?.reshape(&[n, c])?;
        drop(f32_scope);
        (cache.k, cache.v) = (Some(k), Some(v));
        self.c_proj.forward(&y, false)
    }
}

impl Gpt {
    /// Runs `tokens` (at most `block_size`) from the start of an emptied `cache`, as
    /// the full forward of those tokens would, keeping every block's keys and values,
    /// and returns the logits of the token after the last (`[vocab]`). A request's
    /// prompt starts here, and so does every slide of its context.
    pub fn prefill(&mut self, tokens: &[u8], cache: &mut KvCache) -> Result<Tensor> {
        *cache = KvCache::new();
        if tokens.is_empty() || tokens.len() > self.config().block_size {
            return Err(NnError::invalid(
                "Gpt::prefill",
                format!(
                    "{} tokens; expected 1 ..= {} (the position table)",
                    tokens.len(),
                    self.config().block_size
                ),
            ));
        }
        self.rows(tokens, cache)
    }

    /// Feeds `token` after the tokens in `cache` and returns the logits of the next
    /// token (`[vocab]`), dropout off. When the cache already holds `block_size`
    /// tokens it first slides: rebuilt by [`prefill`](Self::prefill) from the last
    /// `block_size - 1` (see the module docs).
    pub fn forward_cached(&mut self, token: u8, cache: &mut KvCache) -> Result<Tensor> {
        let block = self.config().block_size;
        if cache.tokens.is_empty() {
            return self.prefill(&[token], cache);
        }
        if cache.tokens.len() >= block {
            let keep = cache.tokens[cache.tokens.len() + 1 - block..].to_vec();
            if keep.is_empty() {
                return self.prefill(&[token], cache);
            }
            self.prefill(&keep, cache)?;
        }
        self.rows(&[token], cache)
    }

    /// `tokens` through the model at the next positions of `cache` (all of them when
    /// it is empty, else one).
    fn rows(&mut self, tokens: &[u8], cache: &mut KvCache) -> Result<Tensor> {
        let _autocast = self.config().precision.autocast()?;
        let (c, vocab, n) = (self.config().n_embd, self.config().vocab_size, tokens.len());
        if let Some(&bad) = tokens.iter().find(|&&t| usize::from(t) >= vocab) {
            return Err(NnError::invalid(
                "Gpt::forward_cached",
                format!("token {bad} is outside the vocabulary of {vocab}"),
            ));
        }
        let position = cache.tokens.len();
        cache
            .layers
            .resize_with(self.blocks.len(), LayerCache::default);
        let index = tokens.iter().map(|&t| i64::from(t)).collect();
        let index = Tensor::from_vec(index, &[1, n], Device::Cpu)?.to_device(self.device())?;
        let embedded = self.wte.forward(&index, false)?.reshape(&[n, c])?;
        let mut x = embedded.add(&self.wpe.value.narrow(0, position, n)?)?;
        for (block, layer) in self.blocks.iter_mut().zip(&mut cache.layers) {
            let a = block
                .attn
                .forward_cached(&block.ln_1.forward(&x, false)?, layer)?;
            let h = x.add(&a)?;
            let normed = block.ln_2.forward(&h, false)?.reshape(&[1, n, c])?;
            let m = block.mlp.forward(&normed, false)?.reshape(&[n, c])?;
            x = h.add(&m)?;
        }
        cache.tokens.extend_from_slice(tokens);
        let hidden = self.ln_f.forward(&x.narrow(0, n - 1, 1)?, false)?;
        let logits = hidden.matmul(&self.wte.weight().value.t()?)?;
        Ok(logits.reshape(&[vocab])?)
    }
}
