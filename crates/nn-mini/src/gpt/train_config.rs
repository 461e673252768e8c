//! `GptTrainConfig`: everything that defines a GPT training run, stored in its
//! checkpoints.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tensor_core::Device;

use super::{GptConfig, Text};
use crate::train::as_string;
use crate::{AdamWConfig, NnError, Result, WarmupCosine};

/// The text a run trains on, as its checkpoint records it: where it was read from, and
/// its length and SHA-256, which a resume checks (the path may change between
/// machines; the bytes may not).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataSpec {
    /// The file the bytes come from.
    pub path: String,
    /// Its length in bytes.
    pub len: u64,
    /// Its SHA-256, 64 lowercase hex digits.
    pub sha256: String,
}

impl DataSpec {
    /// The record of `text`, read from `path`: the path, its length and its SHA-256.
    #[must_use]
    pub fn of(path: impl AsRef<Path>, text: &Text) -> Self {
        DataSpec {
            path: path.as_ref().display().to_string(),
            len: text.bytes().len() as u64,
            sha256: text.sha256().to_string(),
        }
    }
}

/// A GPT training run: the model, the batches, AdamW with a warm-up and cosine
/// schedule, gradient clipping, and the text. Stored in every checkpoint (as JSON
/// metadata) so a resume rebuilds exactly the same run; only `num_workers`, `device`
/// and the data's path may differ on resume.
///
/// Its JSON ([`RunConfig::to_json`](crate::train::RunConfig::to_json)) is serde's,
/// keys sorted, with the optimiser's four fields at the top level (`lr`, `betas`,
/// `eps`, `weight_decay`), the model and the text as objects, the seed and the device
/// as strings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GptTrainConfig {
    /// The run seed: every random number of the run derives from it (see
    /// [`crate::train`]).
    #[serde(with = "as_string")]
    pub seed: u64,
    /// The architecture.
    pub model: GptConfig,
    /// Tokens per training sequence (at most `model.block_size`).
    pub context: usize,
    /// Sequences per (global) batch.
    pub batch_size: usize,
    /// AdamW's peak learning rate, betas, eps and weight decay (the decay applies to
    /// the linear layers' weight matrices only, see [`Gpt::no_decay_names`](super::Gpt::no_decay_names)).
    #[serde(flatten)]
    pub optimizer: AdamWConfig,
    /// The schedule's final rate.
    pub min_lr: f64,
    /// Steps of linear warm-up.
    pub warmup: u64,
    /// The step at which the cosine decay reaches `min_lr`.
    pub decay_steps: u64,
    /// The largest global gradient norm; larger gradients are scaled down to it. 0
    /// turns clipping off.
    pub grad_clip: f64,
    /// The text.
    pub data: DataSpec,
    /// The fraction of the text held out for validation, at its end (nanoGPT's 0.1);
    /// the run trains on the rest ([`train_bytes`](Self::train_bytes)). 0 in the
    /// configurations of earlier builds, which trained on the whole text; left out of
    /// the JSON when 0, so their checkpoints keep their bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub val_fraction: f64,
    /// Loader worker threads (does not change results).
    pub num_workers: usize,
    /// Where the model runs.
    #[serde(with = "as_string")]
    pub device: Device,
}

fn is_zero(value: &f64) -> bool {
    *value == 0.0
}

impl GptTrainConfig {
    /// `train_gpt`'s defaults over `data`: the default [`GptConfig`] (4 layers, 4
    /// heads, width 128, block 64, dropout 0.1), context 64, batches of 16, AdamW lr
    /// 1e-3 with betas (0.9, 0.95), eps 1e-8 and weight decay 0.1, 100 warm-up steps,
    /// a cosine decay to 1e-4 at step 2000, clipping at 1.0, seed 0, on the CPU.
    #[must_use]
    pub fn new(data: DataSpec) -> Self {
        GptTrainConfig {
            seed: 0,
            model: GptConfig::default(),
            context: 64,
            batch_size: 16,
            optimizer: AdamWConfig::new(1e-3).betas(0.9, 0.95).weight_decay(0.1),
            min_lr: 1e-4,
            warmup: 100,
            decay_steps: 2000,
            grad_clip: 1.0,
            data,
            val_fraction: 0.0,
            num_workers: 0,
            device: Device::Cpu,
        }
    }

    /// The smallest run that still trains every part of the GPT, for tests and quick
    /// checks: one layer of 2 heads, width 16, blocks and context of 8 tokens, dropout
    /// 0.1 (so a resume must replay the masks), batches of 4, 2 warm-up steps and a
    /// decay to step 20; the rest as [`new`](Self::new).
    #[must_use]
    pub fn tiny(data: DataSpec) -> Self {
        GptTrainConfig {
            model: GptConfig {
                vocab_size: 256,
                block_size: 8,
                n_layer: 1,
                n_head: 2,
                n_embd: 16,
                dropout: 0.1,
                bias: true,
                precision: crate::gpt::Precision::F32,
            },
            context: 8,
            batch_size: 4,
            warmup: 2,
            decay_steps: 20,
            ..GptTrainConfig::new(data)
        }
    }

    /// The learning-rate schedule.
    #[must_use]
    pub fn schedule(&self) -> WarmupCosine {
        WarmupCosine {
            lr: self.optimizer.lr,
            min_lr: self.min_lr,
            warmup: self.warmup,
            decay_steps: self.decay_steps,
        }
    }

    /// Windows (samples) per epoch: as many whole batches as `(len - 1) / context`
    /// windows fill (the windows that cover the training bytes about once), at least
    /// one batch.
    /// Whole batches, so every epoch divides among any world size that divides the
    /// batch, as data parallel runs need.
    #[must_use]
    pub fn windows(&self) -> u64 {
        let batch = self.batch_size.max(1) as u64;
        let cover = self.train_bytes().saturating_sub(1) / self.context.max(1) as u64;
        (cover / batch).max(1) * batch
    }

    /// Errors on values that cannot make a run, before anything is allocated or read:
    /// the model's own checks, a context of 0 or above the position table, a text
    /// shorter than a context plus one byte, a SHA-256 that is not 64 hex digits, a
    /// batch of 0, the optimiser's and the schedule's ranges, a negative clip.
    pub fn validate(&self) -> Result<()> {
        self.model.validate()?;
        let bad = |message: String| Err(NnError::invalid("GptTrainConfig", message));
        let sha = &self.data.sha256;
        if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return bad(format!("data.sha256 must be 64 hex digits, got {sha:?}"));
        }
        if self.context == 0 || self.context > self.model.block_size {
            return bad(format!(
                "context {} does not fit the position table of block_size {}: expected 1 ..= {}",
                self.context, self.model.block_size, self.model.block_size
            ));
        }
        if !(0.0..1.0).contains(&self.val_fraction) {
            return bad(format!(
                "val_fraction must be in [0, 1) (the held-out fraction; the rest trains), got {}",
                self.val_fraction
            ));
        }
        if self.train_bytes() < self.context as u64 + 1 {
            return bad(format!(
                "the text {} has {} bytes to train on ({} with val_fraction {}), shorter than \
                 a context of {} plus the next byte: expected at least {} bytes",
                self.data.path,
                self.train_bytes(),
                self.data.len,
                self.val_fraction,
                self.context,
                self.context + 1
            ));
        }
        let held_out = self.data.len - self.train_bytes();
        let one_batch = (self.batch_size.saturating_mul(self.context) as u64).saturating_add(1);
        if self.val_fraction > 0.0 && held_out < one_batch {
            return bad(format!(
                "the validation split of {} holds {held_out} bytes (val_fraction {}), fewer than \
                 one batch of {} windows of {} bytes: expected at least {one_batch} bytes, a \
                 larger val_fraction or val_fraction 0",
                self.data.path, self.val_fraction, self.batch_size, self.context
            ));
        }
        if self.batch_size == 0 {
            return bad("batch_size must be > 0, got 0".into());
        }
        crate::AdamW::new(self.optimizer)?;
        self.schedule().validate()?;
        if !(self.grad_clip.is_finite() && self.grad_clip >= 0.0) {
            return bad(format!(
                "grad_clip must be finite and >= 0 (0: off), got {}",
                self.grad_clip
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::RunConfig;

    fn data(len: u64) -> DataSpec {
        DataSpec {
            path: "text.txt".into(),
            len,
            sha256: "ab".repeat(32),
        }
    }

    #[test]
    fn json_round_trips_exactly() {
        let config = GptTrainConfig {
            seed: u64::MAX,
            min_lr: (0.1 + 0.2) / 1000.0,
            device: Device::Cuda(1),
            ..GptTrainConfig::new(data(1 << 20))
        };
        assert_eq!(
            GptTrainConfig::from_json(&config.to_json()).unwrap(),
            config
        );
        assert!(GptTrainConfig::from_json("{}").is_err());
    }

    /// The bytes checkpoints store (their hash covers them): keys sorted at every
    /// level, the optimiser flattened, f64 in shortest form (`1e-8`).
    #[test]
    fn json_is_the_bytes_checkpoints_store() {
        let config = GptTrainConfig {
            seed: 7,
            ..GptTrainConfig::new(data(1000))
        };
        assert_eq!(
            config.to_json(),
            concat!(
                r#"{"batch_size":16,"betas":[0.9,0.95],"context":64,"#,
                r#""data":{"len":1000,"path":"text.txt","sha256":""#,
                "abababababababababababababababababababababababababababababababab",
                r#""},"decay_steps":2000,"device":"cpu","eps":1e-8,"grad_clip":1.0,"#,
                r#""lr":0.001,"min_lr":0.0001,"model":{"block_size":64,"dropout":0.1,"#,
                r#""n_embd":128,"n_head":4,"n_layer":4,"vocab_size":256},"#,
                r#""num_workers":0,"seed":"7","warmup":100,"weight_decay":0.1}"#
            )
        );
        let split = GptTrainConfig {
            val_fraction: 0.1,
            model: GptConfig {
                bias: false,
                ..config.model
            },
            data: data(20_000),
            ..config.clone()
        };
        let json = split.to_json();
        assert!(json.contains(r#""bias":false"#) && json.contains(r#""val_fraction":0.1"#));
        assert_eq!(GptTrainConfig::from_json(&json).unwrap(), split);
        let bad_sha = config.to_json().replace("abab", "zzzz");
        let err = GptTrainConfig::from_json(&bad_sha).unwrap_err().to_string();
        assert!(err.contains("data.sha256 must be 64 hex digits"), "{err}");
    }

    #[test]
    fn contexts_and_texts_that_do_not_fit_are_refused() {
        let long = GptTrainConfig {
            context: 65,
            ..GptTrainConfig::new(data(1 << 20))
        };
        let err = long.validate().unwrap_err().to_string();
        assert!(
            err.contains("context 65 does not fit the position table of block_size 64"),
            "{err}"
        );
        let short = GptTrainConfig::new(data(64));
        let err = short.validate().unwrap_err().to_string();
        assert!(
            err.contains(
                "64 bytes to train on (64 with val_fraction 0), shorter than a context of 64"
            ),
            "{err}"
        );
        assert!(GptTrainConfig::new(data(65)).validate().is_ok());
    }
}
