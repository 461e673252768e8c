//! Held-out evaluation of a GPT run, nanoGPT's `estimate_loss`: the mean loss over a
//! number of batches of the training split and of the validation split, dropout off.
//!
//! The text splits as nanoGPT's `prepare.py` splits it: the first `int(n * (1 -
//! val_fraction))` bytes train, the rest is held out and never trained on. Evaluation
//! batches are drawn like training batches (random windows, each offset from its
//! sample's own key) but from their own key tree: `fold_in(run, EVAL_DOMAIN)`, the
//! split, then the loader's tree with the step evaluated at as the epoch. Dropout is off, so no generator is drawn from:
//! evaluating (or not, or how often) never changes the training curve, and an
//! evaluation at a step gives the same number whether the run got there straight or
//! through a resume.

use std::ops::Range;

use rng_gen::{fold_in, Key};
use tensor_core::DType;

use super::{token_cross_entropy, Gpt, GptTrainConfig, Text, TextWindows};
use crate::data::load_batch;
use crate::{Module, NnError, Result};

/// Sub-key of the run key for evaluation batches: after the run's own domains and the
/// sample domain of `train_gpt` (`INIT_DOMAIN` 0 .. `DATA_DOMAIN` 3, samples 4).
pub const EVAL_DOMAIN: u64 = 5;

/// The part of the text a loss is measured on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// The bytes the run trains on.
    Train,
    /// The held-out bytes at the end of the text.
    Val,
}

impl GptTrainConfig {
    /// How many bytes of the text the run trains on: nanoGPT's `int(n * 0.9)` for a
    /// `val_fraction` of 0.1, all of them for 0.
    #[must_use]
    pub fn train_bytes(&self) -> u64 {
        (self.data.len as f64 * (1.0 - self.val_fraction)).floor() as u64
    }

    /// The byte range of `split` in the text.
    #[must_use]
    pub fn split_range(&self, split: Split) -> Range<usize> {
        let (at, len) = (self.train_bytes() as usize, self.data.len as usize);
        match split {
            Split::Train => 0..at,
            Split::Val => at..len,
        }
    }
}

/// The mean next-token loss of `model` over `iters` batches of the run's batch size
/// and context, drawn from `split` of `text` for an evaluation at `step`; dropout off.
/// Errors when the split is empty (`val_fraction` 0) or `iters` is 0.
pub fn estimate_loss(
    model: &mut Gpt,
    config: &GptTrainConfig,
    text: &Text,
    split: Split,
    iters: usize,
    step: u64,
) -> Result<f32> {
    let range = config.split_range(split);
    if iters == 0 || range.len() <= config.context {
        return Err(NnError::invalid(
            "estimate_loss",
            format!(
                "{iters} batches of the {split:?} split's {} bytes; expected at least one batch \
                 and a split of at least context + 1 = {} bytes (is val_fraction 0?)",
                range.len(),
                config.context + 1
            ),
        ));
    }
    let batch = config.batch_size;
    let windows = TextWindows::within(text.clone(), range, config.context, iters * batch)?;
    let key = fold_in(fold_in(Key::new(config.seed), EVAL_DOMAIN), split as u64);
    let device = model.device();
    let mut total = 0.0f64;
    for i in 0..iters {
        let indices = (i * batch..(i + 1) * batch).collect();
        let batch = load_batch(&windows, key, step, i as u64, indices)?;
        let logits = model.forward(&batch.input, false)?;
        let (loss, _) = token_cross_entropy(&logits, &batch.target.to_device(device)?)?;
        total += f64::from(loss.to_dtype(DType::F32)?.to_vec::<f32>()?[0]);
    }
    Ok((total / iters as f64) as f32)
}
