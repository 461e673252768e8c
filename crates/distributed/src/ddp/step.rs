//! One forward and backward pass over this rank's rows of a global batch, and the
//! gradient sum across ranks.

use nn_mini::{GlobalRows, Module};

use super::overlap::BucketLauncher;
use tensor_core::Tensor;

use super::reduce::invariant_sum;
use super::tree::{shards_of_rank, subtree_sum_in_place, subtrees_of_rank};
use super::{DistributedDataParallel, ReduceMode};
use crate::{DistError, Result};

/// A loss function as DDP calls it: `(output, target) -> (mean loss, d loss / d output)`.
pub(super) type LossFn<'a> = dyn FnMut(&Tensor, &Tensor) -> nn_mini::Result<(Tensor, Tensor)> + 'a;

/// One micro-shard's (or one pass's) weighted gradients, in parameter order (`None`:
/// the parameter got none, e.g. the shard has no rows), and its weighted loss `[1]`.
pub(super) struct ShardGrads {
    pub(super) grads: Vec<Option<Tensor>>,
    pub(super) loss: Tensor,
}

/// This rank's rows of a global batch: the inputs and targets, and the position of each
/// row in the global batch.
#[derive(Clone, Copy, Debug)]
pub struct LocalRows<'a> {
    /// `[rows, ...]` model inputs.
    pub input: &'a Tensor,
    /// `[rows, ...]` targets, as the loss function takes them.
    pub target: &'a Tensor,
    /// The global row index of each input row (see [`DistributedSampler`](nn_mini::data::DistributedSampler)).
    pub rows: &'a [u64],
    /// Rows in the whole global batch (all ranks together).
    pub batch_rows: u64,
}

impl<M: Module> DistributedDataParallel<M> {
    /// Forward and backward over this rank's rows of one global batch; returns the
    /// global batch's mean loss, and leaves every parameter's `grad` holding the global
    /// batch's mean gradient, the same on every rank. A collective: every rank calls it
    /// once per global batch, with its own rows.
    ///
    /// `loss_fn(output, target)` returns the mean loss over the rows given and its
    /// gradient with respect to `output` (as [`nn_mini::cross_entropy`] does); each
    /// piece is weighted by its share of the global batch, so ranks and micro-shards of
    /// different sizes (the last batch of an epoch) still give the global mean.
    ///
    /// In invariant mode, rank `r` of `W` must hold exactly the global rows `i` whose
    /// micro-shard `i % S` is one of [`shards_of_rank`]`(r, W, S)` (what
    /// [`MicroShardSampler`](nn_mini::data::MicroShardSampler) deals out).
    pub fn forward_backward<F>(&mut self, local: LocalRows<'_>, mut loss_fn: F) -> Result<Tensor>
    where
        F: FnMut(&Tensor, &Tensor) -> nn_mini::Result<(Tensor, Tensor)>,
    {
        self.check_rows(&local)?;
        // Row groups are this step's business alone (the single pass sets them); a
        // caller's leftover would leave the passes below without ungrouped gradients.
        self.module.set_grad_row_groups(None);
        let batch = self.batches;
        self.batches += 1;
        let result = match self.config.mode {
            ReduceMode::Fast => self.fast_step(batch, &local, &mut loss_fn),
            ReduceMode::Invariant { micro_shards } => {
                self.invariant_step(batch, micro_shards, &local, &mut loss_fn)
            }
        };
        self.module.set_global_rows(None);
        self.module.set_grad_row_groups(None);
        result
    }

    fn check_rows(&self, local: &LocalRows<'_>) -> Result<()> {
        const OP: &str = "DistributedDataParallel::forward_backward";
        let n = local.rows.len();
        let leading = |t: &Tensor| t.dims().first().copied();
        if leading(local.input) != Some(n) || leading(local.target) != Some(n) {
            return Err(DistError::invalid(
                OP,
                format!(
                    "input {:?} and target {:?} must have one row per global row index ({n})",
                    local.input.dims(),
                    local.target.dims()
                ),
            ));
        }
        let (world, rank) = (self.group.world_size(), self.group.rank());
        let held = match self.config.mode {
            ReduceMode::Invariant { micro_shards } => {
                Some((micro_shards, shards_of_rank(rank, world, micro_shards)))
            }
            ReduceMode::Fast => None,
        };
        for &row in local.rows {
            if row >= local.batch_rows {
                return Err(DistError::invalid(
                    OP,
                    format!(
                        "row {row} is not in the global batch's 0..{}",
                        local.batch_rows
                    ),
                ));
            }
            if let Some((shards, held)) = &held {
                if !held.contains(&((row % *shards as u64) as usize)) {
                    return Err(DistError::invalid(
                        OP,
                        format!("invariant mode: rank {rank} of {world} holds the rows i with i % {shards} in {held:?}, got row {row}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Forward of the rows `picks` (indices into `local`) and their loss, weighted by
    /// their share of the global batch: the gradient of the weighted loss with respect to
    /// the output (`None` without rows), and the weighted loss `[1]`. No rows: the
    /// forward still runs (random layers reserve the global batch's stretch on every
    /// rank alike) and there is no gradient.
    fn weighted_forward(
        &mut self,
        batch: u64,
        local: &LocalRows<'_>,
        picks: &[usize],
        loss_fn: &mut LossFn<'_>,
    ) -> Result<(Option<Tensor>, Tensor)> {
        let rows: Vec<u64> = picks.iter().map(|&k| local.rows[k]).collect();
        // Rows are picked where the caller keeps them (on the host, no device round
        // trip) and only then moved to the model's device.
        let input = local.input.index_select(0, picks)?.to_device(self.device)?;
        self.module.zero_grad();
        self.module
            .set_global_rows(Some(&GlobalRows::new(batch, local.batch_rows, rows)?));
        let output = self.module.forward(&input, true)?;
        if picks.is_empty() {
            return Ok((None, Tensor::zeros(&[1], self.dtype, self.device)?));
        }
        let target = local.target.index_select(0, picks)?;
        let (mean, grad) = loss_fn(&output, &target)?;
        let weight = picks.len() as f64 / local.batch_rows as f64;
        let loss = mean
            .to_dtype(self.dtype)?
            .reshape(&[1])?
            .mul_scalar(weight)?;
        Ok((Some(grad.mul_scalar(weight)?), loss))
    }

    /// Forward and backward of the rows `picks`, weighted (see [`Self::weighted_forward`]).
    fn weighted_pass(
        &mut self,
        batch: u64,
        local: &LocalRows<'_>,
        picks: &[usize],
        loss_fn: &mut LossFn<'_>,
    ) -> Result<ShardGrads> {
        let (grad, loss) = self.weighted_forward(batch, local, picks, loss_fn)?;
        if let Some(grad) = grad {
            self.module.backward_params(&grad)?;
        }
        let grads = self
            .module
            .parameters_mut()
            .into_iter()
            .map(|p| p.grad.take())
            .collect();
        Ok(ShardGrads { grads, loss })
    }

    /// Each bucket's all-reduce is enqueued as soon as the backward reported all of its
    /// parameters' gradients ([`Module::backward_params_notify`]), so the collectives of
    /// the last layers' buckets run while the first layers' backward is still issued.
    fn fast_step(
        &mut self,
        batch: u64,
        local: &LocalRows<'_>,
        loss_fn: &mut LossFn<'_>,
    ) -> Result<Tensor> {
        let all: Vec<usize> = (0..local.rows.len()).collect();
        let (grad, loss) = self.weighted_forward(batch, local, &all, loss_fn)?;
        let count = self.buckets.len();
        let params = self.module.parameters().len();
        let mut launcher = BucketLauncher::new(
            &self.buckets,
            &*self.group,
            &loss,
            (self.dtype, self.device),
            (count, params),
        );
        if let Some(grad) = grad {
            self.module
                .backward_params_notify(&grad, 0, &mut |first, ready| {
                    launcher.ready(first, ready);
                    Ok(())
                })?;
        }
        let flat = launcher.finish()?;
        self.install(&flat)
    }

    fn invariant_step(
        &mut self,
        batch: u64,
        micro_shards: usize,
        local: &LocalRows<'_>,
        loss_fn: &mut LossFn<'_>,
    ) -> Result<Tensor> {
        let (world, rank) = (self.group.world_size(), self.group.rank());
        let shards = shards_of_rank(rank, world, micro_shards);
        let shard_picks: Vec<Vec<usize>> = shards
            .iter()
            .map(|&s| {
                (0..local.rows.len())
                    .filter(|&k| local.rows[k] % micro_shards as u64 == s as u64)
                    .collect()
            })
            .collect();
        // Each micro-shard's gradient, as if computed alone (by_shard[k] is shard
        // shards[k]'s), summed into this rank's subtree parameter by parameter: the
        // additions are elementwise, so this gives the bits of summing flattened
        // buckets, with one flatten instead of one per shard.
        let mut by_shard =
            if tensor_core::portable::rows_are_batch_independent(self.dtype, self.device)
                && self.module.supports_grad_row_groups()
            {
                self.single_pass(batch, local, &shard_picks, loss_fn)?
            } else {
                // One forward and backward per shard: the way that needs nothing of the
                // arithmetic or the layers.
                shard_picks
                    .iter()
                    .map(|picks| self.weighted_pass(batch, local, picks, loss_fn))
                    .collect::<Result<_>>()?
            };
        // Where each shard's gradients sit in by_shard.
        let mut slot = vec![0; micro_shards];
        for (k, &s) in shards.iter().enumerate() {
            slot[s] = k;
        }
        let dims = self.parameter_dims();
        let mut flat_by_subtree = Vec::new();
        for node in subtrees_of_rank(rank, world, micro_shards) {
            let (c, m) = (node.class, node.modulus);
            let mut partials = Vec::with_capacity(dims.len());
            for (i, dims) in dims.iter().enumerate() {
                partials.push(subtree_sum_in_place(c, m, micro_shards, &mut |s| {
                    // Each leaf is handed over (taken), so the tree adds into it in place.
                    match by_shard[slot[s]].grads[i].take() {
                        Some(g) => Ok(g),
                        // No rows, no gradient: zeros, as a flattened bucket holds them.
                        None => Ok(Tensor::zeros(dims, self.dtype, self.device)?),
                    }
                })?);
            }
            let loss = subtree_sum_in_place(c, m, micro_shards, &mut |s| {
                Ok(by_shard[slot[s]].loss.clone())
            })?;
            let partials: Vec<Option<&Tensor>> = partials.iter().map(Some).collect();
            flat_by_subtree.push(self.buckets.flatten(
                &partials,
                &loss,
                self.dtype,
                self.device,
            )?);
        }
        let buckets = flat_by_subtree.first().map_or(0, Vec::len);
        let mut summed = Vec::with_capacity(buckets);
        for b in 0..buckets {
            let partials: Vec<Tensor> = flat_by_subtree.iter().map(|f| f[b].clone()).collect();
            summed.push(invariant_sum(&*self.group, micro_shards, &partials)?);
        }
        self.install(&summed)
    }

    /// Sets every parameter's gradient from the summed buckets; returns the loss.
    fn install(&mut self, flat: &[Tensor]) -> Result<Tensor> {
        let dims = self.parameter_dims();
        let dims: Vec<&[usize]> = dims.iter().map(Vec::as_slice).collect();
        let (grads, loss) = self.buckets.unflatten(flat, &dims)?;
        for (p, g) in self.module.parameters_mut().into_iter().zip(grads) {
            p.grad = Some(g);
        }
        Ok(loss)
    }

    /// Each parameter's dims, in parameter order (what zero leaves and unflattening need).
    fn parameter_dims(&self) -> Vec<Vec<usize>> {
        self.module
            .parameters()
            .iter()
            .map(|p| p.value.dims().to_vec())
            .collect()
    }
}
