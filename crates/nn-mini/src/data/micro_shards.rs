//! `MicroShardSampler`: a data parallel rank's share of every global batch when the
//! gradients are summed over micro-shards (`distributed`'s invariant mode).
//!
//! The global batch is cut into `S` micro-shards, shard `s` holding the batch's rows `i`
//! with `i % S == s` (docs/contract.md §9.3). A rank holds a set of whole shards, fixed
//! for the run, and loads exactly their rows of each of the single process's batches:
//! the loader's batch size is the *global* batch, its batches are the single process's
//! (same epoch order, same positions, same per-sample keys), and each is filtered down
//! to this rank's rows. Unlike [`DistributedSampler`](super::DistributedSampler), ranks
//! may hold different numbers of rows (3 ranks of 8 shards hold 3, 3 and 2 of them), and
//! nothing is padded: an epoch that does not divide by the world size still has the
//! single process's batches, the last one short on every rank alike.

use super::EpochOrder;
use crate::{NnError, Result};

/// The micro-shards one rank holds: of every global batch, the rows `i` whose
/// micro-shard `i % S` is one of them (the loader's batch size is the global batch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MicroShardSampler {
    micro_shards: usize,
    /// The shards held, in the order given.
    shards: Vec<usize>,
    /// `held[s]`: whether shard `s` is one of them.
    held: Vec<bool>,
}

impl MicroShardSampler {
    /// The rank holding `shards` of `micro_shards` (each below it, none twice, at least
    /// one).
    pub fn new(micro_shards: usize, shards: &[usize]) -> Result<Self> {
        const OP: &str = "MicroShardSampler::new";
        if shards.is_empty() || shards.len() > micro_shards {
            return Err(NnError::invalid(
                OP,
                format!(
                    "a rank holds 1..={micro_shards} of the {micro_shards} micro-shards, got {}",
                    shards.len()
                ),
            ));
        }
        let mut held = vec![false; micro_shards];
        for &s in shards {
            if s >= micro_shards || held[s] {
                return Err(NnError::invalid(
                    OP,
                    format!(
                        "the shards {shards:?} must be distinct and below {micro_shards}; {s} is not"
                    ),
                ));
            }
            held[s] = true;
        }
        Ok(MicroShardSampler {
            micro_shards,
            shards: shards.to_vec(),
            held,
        })
    }

    /// The number of micro-shards the global batch is cut into.
    #[must_use]
    pub fn micro_shards(&self) -> usize {
        self.micro_shards
    }

    /// The shards this rank holds.
    #[must_use]
    pub fn shards(&self) -> &[usize] {
        &self.shards
    }

    /// Whether row `row` of a global batch is this rank's.
    #[must_use]
    pub fn holds(&self, row: usize) -> bool {
        self.held[row % self.micro_shards]
    }

    /// The rows of a global batch of `batch_rows` rows that this rank loads, ascending:
    /// local row `j` of its batch is global row `rows(batch_rows)[j]`.
    #[must_use]
    pub fn rows(&self, batch_rows: usize) -> Vec<u64> {
        (0..batch_rows)
            .filter(|&i| self.holds(i))
            .map(|i| i as u64)
            .collect()
    }

    /// The dataset indices of this rank's rows of the global batch at positions `start
    /// .. start + batch_size` (clipped to the epoch) of an epoch with `order`.
    pub fn indices(
        &self,
        order: &EpochOrder,
        start: usize,
        batch_size: usize,
    ) -> Result<Vec<usize>> {
        let batch = order.indices(start, batch_size)?;
        Ok(batch
            .into_iter()
            .enumerate()
            .filter(|&(row, _)| self.holds(row))
            .map(|(_, index)| index)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ranks' rows of a batch partition it, each rank's in ascending order, and the
    /// indices are those rows of the single process's batch.
    #[test]
    fn ranks_partition_each_global_batch() {
        let order = EpochOrder::Sequential { len: 21 };
        let ranks = [vec![0, 4, 2], vec![6, 1, 5], vec![3, 7]];
        for (start, batch) in [(0, 16), (16, 16)] {
            let mut all = Vec::new();
            for shards in &ranks {
                let s = MicroShardSampler::new(8, shards).unwrap();
                let rows = s.rows(batch.min(21 - start));
                let indices = s.indices(&order, start, batch).unwrap();
                assert_eq!(
                    indices,
                    rows.iter().map(|&r| start + r as usize).collect::<Vec<_>>()
                );
                all.extend(indices);
            }
            all.sort_unstable();
            assert_eq!(all, (start..21.min(start + batch)).collect::<Vec<_>>());
        }
        assert_eq!(
            MicroShardSampler::new(8, &[3, 7]).unwrap().rows(12),
            [3, 7, 11]
        );
    }

    #[test]
    fn bad_shard_sets_are_refused() {
        assert!(MicroShardSampler::new(8, &[]).is_err());
        assert!(MicroShardSampler::new(8, &[8]).is_err());
        assert!(MicroShardSampler::new(8, &[1, 1]).is_err());
        assert!(MicroShardSampler::new(0, &[0]).is_err());
    }
}
