//! Generation one token at a time with a key-value cache: each new token runs the
//! model on its own row, reusing the keys and values every earlier position left in
//! the cache, instead of running the whole context again (nanoGPT's `generate`).
//!
//! Every token, the prompt's included, goes through the same single-row step, so what
//! a sequence computes depends on its tokens alone: not on a batch it shares (there is
//! none: rows of different requests never meet in one op), not on the thread count
//! (single-row products are one block of gemm, see `ops/matmul/gemm_blocks.rs`), not on
//! where a generation was interrupted and continued (continuing re-feeds the tokens
//! through the same steps). The step is not bit-identical to the full forward of the
//! same tokens: its attention is a `[1, T]` softmax (log-softmax, then exp) where the
//! full forward runs a causal `[t, t]` one, and its products have other shapes; the
//! two agree to float rounding (tests hold them within 1e-4).
//!
//! Past the position table (`block_size` tokens) the context slides as nanoGPT's
//! `generate` crops it: the cache is rebuilt from the last `block_size - 1` tokens, by
//! the same steps, before the next one is fed.

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
    /// Attention of one new row `x` (`[1, width]`, already layer-normed) over itself
    /// and every row in `cache`, which it then joins.
    fn forward_cached(&mut self, x: &Tensor, cache: &mut LayerCache) -> Result<Tensor> {
        let c = x.dims()[1];
        let (h, d) = (self.heads, c / self.heads);
        let qkv = self.c_attn.forward(x, false)?;
        let head = |i: usize| -> Result<Tensor> {
            Ok(qkv
                .narrow(1, i * c, c)?
                .reshape(&[1, h, d])?
                .transpose(0, 1)?)
        };
        let (q, k, v) = (head(0)?, head(1)?, head(2)?);
        let append = |old: &Option<Tensor>, new: Tensor| -> Result<Tensor> {
            Ok(match old {
                Some(old) => Tensor::cat(&[old.clone(), new], 1)?,
                None => new.contiguous()?,
            })
        };
        let k = append(&cache.k, k)?;
        let v = append(&cache.v, v)?;
        let scale = 1.0 / (d as f64).sqrt();
        let scores = q.matmul(&k.transpose(1, 2)?)?.mul_scalar(scale)?;
        let probs = scores.log_softmax(2)?.exp()?;
        let y = probs.matmul(&v)?.transpose(0, 1)?.reshape(&[1, c])?;
        (cache.k, cache.v) = (Some(k), Some(v));
        self.c_proj.forward(&y, false)
    }
}

impl Gpt {
    /// Feeds `token` after the tokens in `cache` and returns the logits of the next
    /// token (`[vocab]`), dropout off. When the cache already holds `block_size`
    /// tokens it first slides: rebuilt from the last `block_size - 1` (see the module
    /// docs).
    pub fn forward_cached(&mut self, token: u8, cache: &mut KvCache) -> Result<Tensor> {
        let (block, vocab) = (self.config().block_size, self.config().vocab_size);
        if usize::from(token) >= vocab {
            return Err(NnError::invalid(
                "Gpt::forward_cached",
                format!("token {token} is outside the vocabulary of {vocab}"),
            ));
        }
        if cache.tokens.len() >= block {
            let keep = cache.tokens[cache.tokens.len() + 1 - block..].to_vec();
            *cache = KvCache::new();
            for &t in &keep {
                self.step(t, cache)?;
            }
        }
        self.step(token, cache)
    }

    /// One row through the model at the next position of `cache`.
    fn step(&mut self, token: u8, cache: &mut KvCache) -> Result<Tensor> {
        let c = self.config().n_embd;
        let position = cache.tokens.len();
        cache
            .layers
            .resize_with(self.blocks.len(), LayerCache::default);
        let index = Tensor::from_vec(vec![i64::from(token)], &[1, 1], Device::Cpu)?
            .to_device(self.device())?;
        let embedded = self.wte.forward(&index, false)?.reshape(&[1, c])?;
        let mut x = embedded.add(&self.wpe.value.narrow(0, position, 1)?)?;
        for (block, layer) in self.blocks.iter_mut().zip(&mut cache.layers) {
            let a = block
                .attn
                .forward_cached(&block.ln_1.forward(&x, false)?, layer)?;
            let h = x.add(&a)?;
            let normed = block.ln_2.forward(&h, false)?.reshape(&[1, 1, c])?;
            let m = block.mlp.forward(&normed, false)?.reshape(&[1, c])?;
            x = h.add(&m)?;
        }
        cache.tokens.push(token);
        let hidden = self.ln_f.forward(&x, false)?;
        let logits = hidden.matmul(&self.wte.weight().value.t()?)?;
        Ok(logits.reshape(&[self.config().vocab_size])?)
    }
}
