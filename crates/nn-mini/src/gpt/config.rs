//! `GptConfig`: the shape of a GPT (nanoGPT's `GPTConfig`), checked before anything is
//! allocated, and the names and shapes of its parameters.

use serde::{Deserialize, Serialize};

use crate::{NnError, Result};

/// The architecture of a [`Gpt`](super::Gpt), with nanoGPT's field names (the `model`
/// object of a GPT run's `train.config`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GptConfig {
    /// Tokens in the vocabulary (256 for bytes).
    pub vocab_size: usize,
    /// Rows of the position table: the longest sequence the model takes.
    pub block_size: usize,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Attention heads per block; must divide `n_embd`.
    pub n_head: usize,
    /// The width of every token's vector.
    pub n_embd: usize,
    /// Dropout probability after the embeddings, on the attention probabilities, and on
    /// every residual branch.
    pub dropout: f64,
    /// Biases in the linear layers and layer norms (GPT-2's layers). `false` is
    /// nanoGPT's `bias=False`: the checkpoint then has no `.bias` entries, as nanoGPT's
    /// state dict has none. Missing from the configurations of earlier builds, which
    /// always had biases, and left out of the JSON when true, so their checkpoints
    /// keep their bytes.
    #[serde(default = "with_biases", skip_serializing_if = "has_biases")]
    pub bias: bool,
    /// The precision of the matrix products, forward and backward (see [`Precision`]).
    /// Part of the model, as the checkpoint must say it: a run resumes, evaluates and
    /// samples in the precision it trained in. Left out of the JSON when f32 (and f32
    /// when missing), so earlier checkpoints keep their bytes.
    #[serde(default, skip_serializing_if = "Precision::is_f32")]
    pub precision: Precision,
}

/// The precision of a GPT's matrix products: nanoGPT's `dtype` setting for the
/// `torch.autocast` context its training, evaluation and sampling run in.
///
/// Weights, gradients and optimizer state stay f32 either way (bf16 autocast keeps f32
/// master weights); layer norm, softmax and the loss compute in f32.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Every product in f32.
    #[default]
    F32,
    /// bf16 autocast ([`tensor_core::autocast`]): every matmul's f32 operands rounded
    /// to bf16, the products summed in f32; attention over bf16-rounded q, k, v. Defined
    /// on every device, so a bf16 run resumes and audits on a CPU in portable arithmetic.
    Bf16,
}

impl Precision {
    /// The names the command lines and the JSON use.
    pub const NAMES: [&'static str; 2] = ["f32", "bf16"];

    fn is_f32(&self) -> bool {
        *self == Precision::F32
    }

    /// Enters this precision's autocast scope on the calling thread until the guard
    /// drops (none for f32: a scope of plain f32, so a bf16 caller's scope does not
    /// leak into an f32 model).
    pub fn autocast(self) -> Result<tensor_core::AutocastGuard> {
        let dtype = match self {
            Precision::F32 => tensor_core::DType::F32,
            Precision::Bf16 => tensor_core::DType::BF16,
        };
        Ok(tensor_core::autocast(dtype)?)
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        })
    }
}

impl std::str::FromStr for Precision {
    type Err = NnError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(Precision::F32),
            "bf16" => Ok(Precision::Bf16),
            other => Err(NnError::invalid(
                "Precision",
                format!(
                    "unknown precision {other:?}; expected one of {:?}",
                    Self::NAMES
                ),
            )),
        }
    }
}

fn with_biases() -> bool {
    true
}

fn has_biases(bias: &bool) -> bool {
    *bias
}

impl Default for GptConfig {
    /// The small byte-level GPT of `train_gpt`: 4 layers, 4 heads, width 128, context
    /// 64, dropout 0.1, 256 tokens (about 0.8 M parameters: it trains on two CPU cores
    /// in minutes).
    fn default() -> Self {
        GptConfig {
            vocab_size: 256,
            block_size: 64,
            n_layer: 4,
            n_head: 4,
            n_embd: 128,
            dropout: 0.1,
            bias: true,
            precision: Precision::F32,
        }
    }
}

impl GptConfig {
    /// The most parameters a configuration may describe: 2^30 (4 GiB of f32, held four
    /// times over in training: values, gradients, two AdamW moments), checked before
    /// anything is allocated, so a typo or a crafted checkpoint cannot ask for 10^12
    /// bytes.
    pub const MAX_PARAMETERS: u64 = 1 << 30;

    /// Errors on values that cannot make a model, before anything is allocated: a zero
    /// size, heads that do not divide the width, a dropout outside `[0, 1]`, or more than
    /// [`MAX_PARAMETERS`](Self::MAX_PARAMETERS) parameters.
    pub fn validate(&self) -> Result<()> {
        let bad = |message: String| Err(NnError::invalid("GptConfig", message));
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("block_size", self.block_size),
            ("n_layer", self.n_layer),
            ("n_head", self.n_head),
            ("n_embd", self.n_embd),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return bad(format!("{name} must be positive, got 0"));
        }
        if !self.n_embd.is_multiple_of(self.n_head) {
            return bad(format!(
                "n_head {} does not divide n_embd {}: each head takes n_embd / n_head \
                 channels, so expected a divisor of {}",
                self.n_head, self.n_embd, self.n_embd
            ));
        }
        if !(0.0..=1.0).contains(&self.dropout) {
            return bad(format!("dropout must be in [0, 1], got {}", self.dropout));
        }
        match self.parameter_count() {
            Some(n) if n <= Self::MAX_PARAMETERS => Ok(()),
            count => bad(format!(
                "the model would have {} parameters, more than the limit of {} (GptConfig::MAX_PARAMETERS)",
                count.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string()),
                Self::MAX_PARAMETERS
            )),
        }
    }

    /// The names and dims of the parameters, in the model's order (nanoGPT's
    /// `named_parameters()`; `lm_head.weight` is `transformer.wte.weight`, listed
    /// once), computed without building the model.
    #[must_use]
    pub fn parameter_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let (c, hidden) = (self.n_embd, 4 * self.n_embd);
        let mut shapes = vec![
            (
                "transformer.wte.weight".to_string(),
                vec![self.vocab_size, c],
            ),
            (
                "transformer.wpe.weight".to_string(),
                vec![self.block_size, c],
            ),
        ];
        let mut push = |name: String, dims: Vec<usize>| {
            if self.bias || !name.ends_with(".bias") {
                shapes.push((name, dims));
            }
        };
        for layer in 0..self.n_layer {
            let block = |name: &str| format!("transformer.h.{layer}.{name}");
            for (name, dims) in [
                ("ln_1.weight", vec![c]),
                ("ln_1.bias", vec![c]),
                ("attn.c_attn.weight", vec![3 * c, c]),
                ("attn.c_attn.bias", vec![3 * c]),
                ("attn.c_proj.weight", vec![c, c]),
                ("attn.c_proj.bias", vec![c]),
                ("ln_2.weight", vec![c]),
                ("ln_2.bias", vec![c]),
                ("mlp.c_fc.weight", vec![hidden, c]),
                ("mlp.c_fc.bias", vec![hidden]),
                ("mlp.c_proj.weight", vec![c, hidden]),
                ("mlp.c_proj.bias", vec![c]),
            ] {
                push(block(name), dims);
            }
        }
        push("transformer.ln_f.weight".to_string(), vec![c]);
        push("transformer.ln_f.bias".to_string(), vec![c]);
        shapes
    }

    /// Parameters in all, or `None` when the count overflows `u64`.
    #[must_use]
    pub fn parameter_count(&self) -> Option<u64> {
        let (v, t, l, c) = (
            self.vocab_size as u64,
            self.block_size as u64,
            self.n_layer as u64,
            self.n_embd as u64,
        );
        // Per block: the weight matrices (12 c^2) and the vectors: two layer norm
        // weights, and with biases their two biases and the linear layers' 9 c.
        let (vectors, final_norm) = if self.bias { (13, 2) } else { (2, 1) };
        let per_block = c
            .checked_mul(c)?
            .checked_mul(12)?
            .checked_add(c.checked_mul(vectors)?)?;
        v.checked_add(t)?
            .checked_mul(c)?
            .checked_add(l.checked_mul(per_block)?)?
            .checked_add(c.checked_mul(final_norm)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_shapes_agree() {
        let config = GptConfig::default();
        let total: u64 = config
            .parameter_shapes()
            .iter()
            .map(|(_, dims)| dims.iter().product::<usize>() as u64)
            .sum();
        assert_eq!(config.parameter_count(), Some(total));
    }

    #[test]
    fn bad_shapes_are_refused_before_allocating() {
        let heads = GptConfig {
            n_head: 3,
            ..GptConfig::default()
        };
        let err = heads.validate().unwrap_err().to_string();
        assert!(err.contains("n_head 3 does not divide n_embd 128"), "{err}");
        let huge = GptConfig {
            n_embd: 1 << 20,
            n_head: 1,
            ..GptConfig::default()
        };
        assert!(huge
            .validate()
            .unwrap_err()
            .to_string()
            .contains("MAX_PARAMETERS"));
        let zero = GptConfig {
            n_layer: 0,
            ..GptConfig::default()
        };
        assert!(zero.validate().is_err());
    }
}
