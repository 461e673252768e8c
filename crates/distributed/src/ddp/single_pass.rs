//! The invariant mode's micro-shard gradients from one forward and one backward.
//!
//! The micro-shard tree (docs/contract.md §9.3) needs each shard's gradient on its own.
//! The plain way computes each shard in its own forward and backward (in
//! `step.rs`'s `invariant_step`): `S / W` passes of small matrix products
//! per rank. Under portable arithmetic (docs/contract.md §14) every matmul output element
//! is one fma chain over its own row and column, so a row's activations and input
//! gradient are the same bits whichever rows share its batch; only the parameter
//! gradients (`g^T x`, a sum over rows) mix rows. So this rank runs one forward and one
//! backward over all its rows, ordered shard by shard, and asks the layers
//! ([`GradRowGroups`]) for each shard's parameter gradient from that shard's rows with
//! the ops the shard's own pass runs: the same bits as the plain way, for a fraction of
//! the calls.

use nn_mini::{GlobalRows, GradRowGroups, Module};
use tensor_core::Tensor;

use super::step::{LocalRows, LossFn, ShardGrads};
use super::DistributedDataParallel;
use crate::{DistError, Result};

impl<M: Module> DistributedDataParallel<M> {
    /// Every shard of `shard_picks` (indices into `local`, one list per shard) in one
    /// pass; returns each shard's weighted gradients and loss, the bits
    /// one forward and backward per shard returns.
    pub(super) fn single_pass(
        &mut self,
        batch: u64,
        local: &LocalRows<'_>,
        shard_picks: &[Vec<usize>],
        loss_fn: &mut LossFn<'_>,
    ) -> Result<Vec<ShardGrads>> {
        const OP: &str = "DistributedDataParallel::forward_backward";
        let order: Vec<usize> = shard_picks.iter().flatten().copied().collect();
        let sizes: Vec<usize> = shard_picks.iter().map(Vec::len).collect();
        let groups = GradRowGroups::new(&sizes)?;
        let rows: Vec<u64> = order.iter().map(|&k| local.rows[k]).collect();
        let input = local
            .input
            .index_select(0, &order)?
            .to_device(self.device)?;
        self.module.zero_grad();
        self.module
            .set_global_rows(Some(&GlobalRows::new(batch, local.batch_rows, rows)?));
        self.module.set_grad_row_groups(Some(&groups));
        let output = self.module.forward(&input, true)?;
        // Each shard's loss and output gradient exactly as its own pass computes them.
        let mut losses = Vec::with_capacity(sizes.len());
        let mut grads = Vec::with_capacity(sizes.len());
        for (picks, range) in shard_picks.iter().zip(groups.ranges()) {
            let mut loss = Tensor::zeros(&[1], self.dtype, self.device)?;
            if !picks.is_empty() {
                let shard_output = output.narrow(0, range.start, range.len())?.contiguous()?;
                let target = local.target.index_select(0, picks)?;
                let (mean, grad) = loss_fn(&shard_output, &target)?;
                let weight = picks.len() as f64 / local.batch_rows as f64;
                grads.push(grad.mul_scalar(weight)?);
                loss = mean
                    .to_dtype(self.dtype)?
                    .reshape(&[1])?
                    .mul_scalar(weight)?;
            }
            losses.push(loss);
        }
        if !grads.is_empty() {
            self.module.backward_params(&Tensor::cat(&grads, 0)?)?;
        }
        let mut params = self.module.parameters_mut();
        for p in &params {
            let wrong_count = !p.group_grads.is_empty() && p.group_grads.len() != groups.len();
            if wrong_count || p.grad.is_some() {
                return Err(DistError::invalid(
                    OP,
                    format!(
                        "parameter {} holds {} row-group gradients for {} micro-shards{}: \
                         a layer that supports gradient row groups did not honour them",
                        p.name,
                        p.group_grads.len(),
                        groups.len(),
                        if p.grad.is_some() {
                            " and an ungrouped gradient"
                        } else {
                            ""
                        }
                    ),
                ));
            }
        }
        let mut shard_grads: Vec<Vec<Option<Tensor>>> = vec![Vec::new(); sizes.len()];
        for p in &mut params {
            let mut groups = std::mem::take(&mut p.group_grads).into_iter();
            for (shard, grads) in shard_grads.iter_mut().enumerate() {
                // An empty shard has no gradient, as its own pass leaves none.
                grads.push(groups.next().filter(|_| sizes[shard] > 0));
            }
        }
        Ok(shard_grads
            .into_iter()
            .zip(losses)
            .map(|(grads, loss)| ShardGrads { grads, loss })
            .collect())
    }
}
