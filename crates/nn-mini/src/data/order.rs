//! The order in which one epoch visits the dataset: the identity (computed, never
//! stored) or a permutation drawn at the epoch's order key.

use std::sync::Arc;

use rng_gen::{Generator, Key};
use tensor_core::{audit, Device};

use super::keys::order_key;
use crate::{NnError, Result};

/// The largest dataset a shuffling loader accepts: 2^31 samples. A shuffled epoch's order
/// is a materialised permutation (Fisher-Yates, docs/contract.md §5.9), 8 bytes per
/// sample (16 GiB at the limit) plus as much again while `randperm`'s tensor is
/// converted. Past it, [`DataLoaderBuilder::build`](super::DataLoaderBuilder::build)
/// fails with [`NnError::LoaderLimit`] instead of trying; shard such a dataset, or
/// shuffle it in blocks yourself. Unshuffled loaders have no such limit: their order is
/// computed.
pub const MAX_SHUFFLED_LEN: usize = 1 << 31;

/// One epoch's order. `Sequential` is the identity, computed on demand (position `i`
/// is sample `i`), so an unshuffled loader over `usize::MAX` samples needs no memory for
/// it; `Shuffled` holds the permutation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EpochOrder {
    /// Sample `i` at position `i`, for `len` samples.
    Sequential {
        /// Number of samples.
        len: usize,
    },
    /// The permutation drawn for the epoch.
    Shuffled(Arc<[usize]>),
}

impl EpochOrder {
    /// Number of positions (the dataset length).
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            EpochOrder::Sequential { len } => *len,
            EpochOrder::Shuffled(perm) => perm.len(),
        }
    }

    /// True for an empty dataset.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sample indices at positions `start .. start + count` (clipped to the end).
    /// Allocates only for the positions asked for; `count` larger than memory allows
    /// is an error, not an abort.
    pub fn indices(&self, start: usize, count: usize) -> Result<Vec<usize>> {
        let end = start.saturating_add(count).min(self.len());
        let start = start.min(end);
        let mut out = Vec::new();
        out.try_reserve_exact(end - start).map_err(|e| {
            NnError::invalid(
                "EpochOrder::indices",
                format!("cannot hold {} indices: {e}", end - start),
            )
        })?;
        match self {
            EpochOrder::Sequential { .. } => out.extend(start..end),
            EpochOrder::Shuffled(perm) => out.extend_from_slice(&perm[start..end]),
        }
        Ok(out)
    }

    /// Every position's sample index, materialised (for tests and small datasets).
    pub fn to_vec(&self) -> Result<Vec<usize>> {
        self.indices(0, self.len())
    }
}

/// The order in which epoch `epoch` visits a dataset of `len` samples: `randperm(len)`
/// drawn by a generator placed at [`order_key`] when shuffling, the identity otherwise.
/// Errors with [`NnError::LoaderLimit`] when shuffling more than [`MAX_SHUFFLED_LEN`].
pub fn epoch_order(loader: Key, epoch: u64, len: usize, shuffle: bool) -> Result<EpochOrder> {
    if !shuffle {
        return Ok(EpochOrder::Sequential { len });
    }
    check_shuffled_len(len)?;
    let generator = Generator::from_key(Device::Cpu, order_key(loader, epoch));
    // The loader computes an epoch's order when it first needs it, which with workers
    // prefetching is earlier than without: the audit records it in a stream of its own.
    let stream = || {
        format!(
            "loader/{:016x}.{}/e{epoch}/order",
            loader.seed, loader.offset
        )
    };
    let perm = audit::stream(stream, || {
        rng_gen::randperm(len, Device::Cpu, Some(&generator))
    })?;
    let perm: Arc<[usize]> = perm
        .to_vec::<i64>()?
        .into_iter()
        .map(|i| i as usize)
        .collect();
    Ok(EpochOrder::Shuffled(perm))
}

/// Errors unless a dataset of `len` samples can be shuffled (see [`MAX_SHUFFLED_LEN`]).
pub(crate) fn check_shuffled_len(len: usize) -> Result<()> {
    if len > MAX_SHUFFLED_LEN {
        return Err(NnError::LoaderLimit {
            what: "the length of a shuffled dataset",
            value: len as u128,
            limit: MAX_SHUFFLED_LEN as u64,
            constant: "MAX_SHUFFLED_LEN",
        });
    }
    Ok(())
}

/// The orders of the (at most two) epochs in use: the one being delivered and the one
/// prefetching may run into.
#[derive(Default)]
pub(crate) struct OrderCache {
    entries: Vec<(u64, EpochOrder)>,
}

impl OrderCache {
    /// Epoch `epoch`'s order, drawn once and kept while it is in use.
    pub fn get(&mut self, key: Key, epoch: u64, len: usize, shuffle: bool) -> Result<EpochOrder> {
        if let Some((_, order)) = self.entries.iter().find(|(e, _)| *e == epoch) {
            return Ok(order.clone());
        }
        let order = epoch_order(key, epoch, len, shuffle)?;
        if self.entries.len() >= 2 {
            self.entries.remove(0);
        }
        self.entries.push((epoch, order.clone()));
        Ok(order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_orders_are_computed_not_stored() {
        let order = epoch_order(Key::new(1), 0, usize::MAX, false).unwrap();
        assert_eq!(order.len(), usize::MAX);
        assert_eq!(
            order.indices(usize::MAX - 2, 4).unwrap(),
            [usize::MAX - 2, usize::MAX - 1]
        );
        assert_eq!(order.indices(usize::MAX, 4).unwrap(), Vec::<usize>::new());
        assert_eq!(order.indices(3, 2).unwrap(), [3, 4]);
        assert!(
            order.indices(0, usize::MAX).is_err(),
            "no room for 2^64 indices"
        );
    }

    #[test]
    fn shuffled_orders_are_permutations_up_to_the_limit() {
        let order = epoch_order(Key::new(1), 2, 10, true).unwrap();
        let mut seen = order.to_vec().unwrap();
        assert_ne!(seen, (0..10).collect::<Vec<_>>());
        seen.sort_unstable();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        let err = epoch_order(Key::new(1), 0, MAX_SHUFFLED_LEN + 1, true).unwrap_err();
        assert!(err.to_string().contains("MAX_SHUFFLED_LEN"), "{err}");
    }
}
