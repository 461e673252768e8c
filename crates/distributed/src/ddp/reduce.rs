//! The two ways DDP sums gradients across ranks.
//!
//! - **Fast**: the backend's own all-reduce of each bucket. One collective; its
//!   association order is the backend's (NCCL picks ring, tree or NVLS, channels and
//!   chunking itself; MPI picks by process count and size), so the result is
//!   reproducible at a fixed world size only.
//! - **Invariant**: each rank first sums its own micro-shards into its subtree of the
//!   fixed tree ([`super::tree`]); then an `all_to_all` gives rank `q` chunk `q` of every
//!   rank's partial, rank `q` sums those `W` chunks with the top of the tree, and an
//!   `all_gather` hands every rank every summed chunk. Each rank sends `(W - 1) / W` of
//!   the buffer in each of the two collectives: the bytes of a ring all-reduce (reduce-
//!   scatter then all-gather), not a gather of every rank's whole gradient.

use tensor_core::Tensor;

use super::tree::subtree_sum;
use crate::{even_counts, ProcessGroup, ReduceOp, Result};

/// The backend's all-reduce of `partial` (fast mode).
pub fn fast_sum(group: &dyn ProcessGroup, partial: &mut Tensor) -> Result<()> {
    group.all_reduce(partial, ReduceOp::Sum)
}

/// The sum over ranks of `partial` (this rank's subtree `T(rank, W)`, 1-D) in the fixed
/// tree's order, on every rank.
pub fn invariant_sum(group: &dyn ProcessGroup, partial: &Tensor) -> Result<Tensor> {
    let (world, rank) = (group.world_size(), group.rank());
    if world == 1 {
        // The top of the tree over one leaf is that leaf: nothing to add or move.
        return Ok(partial.clone());
    }
    let n = partial.elem_count();
    let chunks = even_counts(n, world);
    let mine = chunks[rank];
    // Output tensors only give the size and dtype (collectives replace their values),
    // so `partial` itself serves wherever the sizes match: no buffer to allocate and
    // zero (first-touching a fresh 16 MiB costs milliseconds on the bench machine).
    let placeholder = |len: usize| -> Result<Tensor> {
        if len == n {
            Ok(partial.clone())
        } else {
            Ok(Tensor::zeros(&[len], partial.dtype(), partial.device())?)
        }
    };
    // Chunk q of every rank's partial goes to rank q.
    let mut received = placeholder(mine * world)?;
    group.all_to_all(&mut received, partial, &vec![mine; world], &chunks)?;
    let summed = subtree_sum(0, 1, world, &mut |q| {
        Ok(received.narrow(0, q * mine, mine)?.contiguous()?)
    })?;
    let mut full = placeholder(n)?;
    group.all_gather(&mut full, &summed, &chunks)?;
    Ok(full)
}
