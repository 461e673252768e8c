//! `DistributedSampler`: which samples of each epoch a data parallel rank loads, with
//! PyTorch's semantics.
//!
//! `torch.utils.data.distributed.DistributedSampler` takes the epoch's order (a
//! permutation seeded by the shared seed and the epoch when shuffling), pads it by
//! repeating its start until its length divides by the number of replicas (or, with
//! `drop_last`, cuts the tail instead), and gives rank `r` the positions `r, r + W,
//! r + 2W, ...`. ditto does the same, with two differences that remove PyTorch's
//! classic mistakes:
//!
//! - the epoch is the [`DataLoader`](super::DataLoader)'s own (part of its state), so
//!   there is no `set_epoch` to forget and a checkpoint resumes mid-epoch;
//! - the order is the loader's (`fold_in(loader key, epoch)`, the same order a
//!   single-process loader visits), and each sample's augmentation comes from its own
//!   key, so a sample is loaded identically on whichever rank it lands.
//!
//! Dealing positions round-robin is also what makes a global batch independent of the
//! world size: with `W` ranks loading `b` samples each, local batch `t` of rank `r` is
//! positions `(t * b + j) * W + r`, so together the ranks hold positions `t * W * b ..
//! (t + 1) * W * b` of the (padded) order, the global batch a single process with batch
//! size `W * b` loads, and local row `j` of rank `r` is row `j * W + r` of it
//! ([`global_row`](DistributedSampler::global_row)).

use super::EpochOrder;
use crate::{NnError, Result};

/// The share of every epoch that rank `rank` of `num_replicas` loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DistributedSampler {
    num_replicas: usize,
    rank: usize,
    drop_last: bool,
}

impl DistributedSampler {
    /// Rank `rank` of `num_replicas` (`rank < num_replicas`), padding the order like
    /// PyTorch's default (`drop_last = false`).
    pub fn new(num_replicas: usize, rank: usize) -> Result<Self> {
        if num_replicas == 0 || rank >= num_replicas {
            return Err(NnError::invalid(
                "DistributedSampler::new",
                format!("rank {rank} is not in 0..{num_replicas}"),
            ));
        }
        Ok(DistributedSampler {
            num_replicas,
            rank,
            drop_last: false,
        })
    }

    /// `true` drops the order's tail so its length divides by the number of replicas,
    /// instead of padding it with repeated samples.
    #[must_use]
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }

    /// The number of replicas (the world size).
    #[must_use]
    pub fn num_replicas(&self) -> usize {
        self.num_replicas
    }

    /// This rank.
    #[must_use]
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Samples per rank and epoch for a dataset of `len`: `ceil(len / W)` when padding,
    /// `floor(len / W)` with `drop_last` (PyTorch's `num_samples`).
    #[must_use]
    pub fn num_samples(&self, len: usize) -> usize {
        if self.drop_last {
            len / self.num_replicas
        } else {
            len.div_ceil(self.num_replicas)
        }
    }

    /// Positions per epoch over all ranks, padding included (PyTorch's `total_size`).
    #[must_use]
    pub fn total_size(&self, len: usize) -> usize {
        self.num_samples(len) * self.num_replicas
    }

    /// The row of the global batch that local row `row` of this rank's batch is, when
    /// every rank loads batches of the same size: `row * W + rank`.
    #[must_use]
    pub fn global_row(&self, row: usize) -> usize {
        row * self.num_replicas + self.rank
    }

    /// The dataset indices of this rank's positions `start .. start + count` (clipped to
    /// [`num_samples`](Self::num_samples)) of an epoch with `order`.
    pub fn indices(&self, order: &EpochOrder, start: usize, count: usize) -> Result<Vec<usize>> {
        let len = order.len();
        let end = start.saturating_add(count).min(self.num_samples(len));
        let start = start.min(end);
        let mut out = Vec::new();
        out.try_reserve_exact(end - start).map_err(|e| {
            NnError::invalid(
                "DistributedSampler::indices",
                format!("cannot hold {} indices: {e}", end - start),
            )
        })?;
        for local in start..end {
            // Padding repeats the order from its start (PyTorch: `indices += indices[:pad]`,
            // cycled when the padding is longer than the order).
            let position = (local * self.num_replicas + self.rank) % len;
            out.push(match order {
                EpochOrder::Sequential { .. } => position,
                EpochOrder::Shuffled(perm) => perm[position],
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// PyTorch's `DistributedSampler.__iter__`, written out as the reference.
    fn pytorch(order: &[usize], world: usize, rank: usize, drop_last: bool) -> Vec<usize> {
        let len = order.len();
        let num_samples = if drop_last && !len.is_multiple_of(world) {
            (len - world).div_ceil(world)
        } else {
            len.div_ceil(world)
        };
        let total = num_samples * world;
        let mut indices = order.to_vec();
        if drop_last {
            indices.truncate(total);
        } else {
            while indices.len() < total {
                let pad = (total - indices.len()).min(len);
                indices.extend_from_slice(&order[..pad]);
            }
        }
        indices.into_iter().skip(rank).step_by(world).collect()
    }

    #[test]
    fn matches_pytorch_for_padding_and_drop_last() {
        for len in [1usize, 2, 3, 7, 10, 16] {
            let perm: Vec<usize> = (0..len).map(|i| (i * 7 + 3) % len).collect();
            let orders = [
                EpochOrder::Sequential { len },
                EpochOrder::Shuffled(Arc::from(perm.clone())),
            ];
            for order in &orders {
                let plain = order.to_vec().unwrap();
                for world in 1..=5 {
                    for drop_last in [false, true] {
                        if drop_last && len < world {
                            continue; // PyTorch's formula goes negative here
                        }
                        for rank in 0..world {
                            let s = DistributedSampler::new(world, rank)
                                .unwrap()
                                .drop_last(drop_last);
                            let ours = s.indices(order, 0, usize::MAX).unwrap();
                            assert_eq!(
                                ours,
                                pytorch(&plain, world, rank, drop_last),
                                "len {len} world {world}"
                            );
                            assert_eq!(ours.len(), s.num_samples(len));
                            assert_eq!(
                                s.indices(order, 1, 2).unwrap(),
                                ours.iter().skip(1).take(2).copied().collect::<Vec<_>>()
                            );
                        }
                    }
                }
            }
        }
        assert!(DistributedSampler::new(2, 2).is_err());
        assert!(DistributedSampler::new(0, 0).is_err());
    }
}
