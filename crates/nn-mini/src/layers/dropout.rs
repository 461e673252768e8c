//! `Dropout` on the Philox dropout op, with a backward that regenerates the mask.

use rng_gen::{DropoutState, Generator, Key, RandomOp};
use tensor_core::{DType, Tensor};

use crate::{GlobalRows, Module, NnError, Result};

/// Zeroes each element with probability `p` in training and scales the kept ones by
/// `1 / (1 - p)`; the identity in evaluation (and then it draws nothing).
///
/// Why its own [`Generator`]? The mask is a pure function of the generator's
/// `(seed, offset)` at the call, so a training loop that saves and restores this one
/// generator (as [`crate::train::Trainer`] does) replays the same masks after a resume.
/// The backward pass uses the forward's [`DropoutState`]: the reservation `(seed,
/// offset)` the mask was drawn from and, by default, the mask packed one bit per element
/// (n / 8 bytes), which [`rng_gen::dropout_backward`] reads instead of recomputing
/// Philox (for a 128 x 256 f32 activation, one thread, the AVX-512 Xeon of
/// `benches/RESULTS.md`, 2026-11-22: about 10 us instead of 44 us; forward costs about
/// the same with or without the mask, 38 us). With
/// [`store_mask(false)`](Self::store_mask) nothing but the key is kept and backward
/// regenerates the mask from that same reservation; the two give identical bits.
///
/// Under [`set_global_rows`](Module::set_global_rows) (data parallel) the input holds
/// some rows of a global batch: the layer reserves the stretch of the whole global batch
/// at its first forward of each batch and draws each row at its global position with
/// [`rng_gen::dropout_rows`], so the rows get the masks a single process would give them.
/// The mask is then always kept for backward.
#[derive(Debug)]
pub struct Dropout {
    p: f64,
    generator: Generator,
    store_mask: bool,
    saved: Option<DropoutState>,
    global: Option<GlobalRows>,
    /// The reservation of the current global batch: `(batch number, key, row length,
    /// dtype)`.
    reserved: Option<(u64, Key, u64, DType)>,
}

impl Dropout {
    /// Dropout with probability `p` in `[0, 1]`, drawing from `generator` (a handle:
    /// clones share the stream).
    pub fn new(p: f64, generator: &Generator) -> Result<Self> {
        if !(0.0..=1.0).contains(&p) {
            return Err(NnError::invalid(
                "Dropout::new",
                format!("p must be in [0, 1], got {p}"),
            ));
        }
        Ok(Dropout {
            p,
            generator: generator.clone(),
            store_mask: true,
            saved: None,
            global: None,
            reserved: None,
        })
    }

    /// Whether forward keeps the packed mask for backward (default) or only the key, in
    /// which case backward regenerates the mask (less memory, more compute).
    #[must_use]
    pub fn store_mask(mut self, store: bool) -> Self {
        self.store_mask = store;
        self
    }

    /// The drop probability.
    #[must_use]
    pub fn p(&self) -> f64 {
        self.p
    }

    /// The generator the masks come from (a shared handle).
    #[must_use]
    pub fn generator(&self) -> &Generator {
        &self.generator
    }

    /// The key of the current global batch for rows of `row_len` elements: reserved for
    /// the whole global batch at its first forward, reused by its later forwards.
    fn global_key(&mut self, row_len: u64, dtype: DType, global: &GlobalRows) -> Result<Key> {
        match self.reserved {
            Some((batch, key, len, reserved_dtype)) if batch == global.batch() => {
                if len != row_len || reserved_dtype != dtype {
                    return Err(NnError::invalid(
                        "Dropout::forward",
                        format!(
                            "rows of {row_len} {dtype} elements after rows of {len} {reserved_dtype} in the same global batch"
                        ),
                    ));
                }
                Ok(key)
            }
            _ => {
                let n = row_len.checked_mul(global.batch_rows()).ok_or_else(|| {
                    NnError::invalid(
                        "Dropout::forward",
                        "the global batch's element count overflows u64",
                    )
                })?;
                let key = self.generator.reserve(RandomOp::Dropout, dtype, n);
                self.reserved = Some((global.batch(), key, row_len, dtype));
                Ok(key)
            }
        }
    }

    /// Dropout of the rows `global` names: reserves the whole global batch's stretch at
    /// the first forward of the batch, then draws these rows at their positions in it.
    fn forward_rows(&mut self, input: &Tensor, global: &GlobalRows) -> Result<Tensor> {
        let row_len: u64 = input.dims().iter().skip(1).map(|&d| d as u64).product();
        let key = self.global_key(row_len, input.dtype(), global)?;
        let (out, state) =
            rng_gen::dropout_rows(input, self.p, key, global.batch_rows(), global.rows())?;
        self.saved = Some(state);
        Ok(out)
    }

    /// Where an op that applies this dropout itself (a fused attention) draws the mask
    /// of a training forward whose input has rows of `row_len` elements: from the
    /// generator, or, under [`set_global_rows`](Module::set_global_rows), at the rows'
    /// places in the global batch's reservation, exactly as [`Module::forward`] would.
    pub(crate) fn mask_source(&mut self, row_len: u64, dtype: DType) -> Result<MaskSource> {
        match self.global.clone() {
            Some(global) => Ok(MaskSource::Rows {
                key: self.global_key(row_len, dtype, &global)?,
                global,
            }),
            None => Ok(MaskSource::Draw),
        }
    }
}

/// What [`Dropout::mask_source`] answers.
#[derive(Debug)]
pub(crate) enum MaskSource {
    /// Draw from the layer's generator.
    Draw,
    /// The global batch's reservation, at these rows.
    Rows { key: Key, global: GlobalRows },
}

impl Module for Dropout {
    fn forward(&mut self, input: &Tensor, train: bool) -> Result<Tensor> {
        if !train {
            self.saved = None;
            return Ok(input.clone());
        }
        if let Some(global) = self.global.clone() {
            return self.forward_rows(input, &global);
        }
        let (out, state) = if self.store_mask {
            rng_gen::dropout_with_mask(input, self.p, true, Some(&self.generator))?
        } else {
            rng_gen::dropout(input, self.p, true, Some(&self.generator))?
        };
        self.saved = Some(state);
        Ok(out)
    }

    fn backward(&mut self, grad_output: &Tensor) -> Result<Tensor> {
        let state = self
            .saved
            .take()
            .ok_or(NnError::BackwardWithoutForward { layer: "Dropout" })?;
        Ok(rng_gen::dropout_backward(grad_output, &state)?)
    }

    fn set_global_rows(&mut self, rows: Option<&GlobalRows>) {
        self.global = rows.cloned();
    }

    /// Without parameters, and its backward masks each element by its own mask bit:
    /// each row's input gradient is its own.
    fn supports_grad_row_groups(&self) -> bool {
        true
    }
}
