//! The two ways DDP sums gradients across ranks.
//!
//! - **Fast**: the backend's own all-reduce of each bucket. One collective; its
//!   association order is the backend's (NCCL picks ring, tree or NVLS, channels and
//!   chunking itself; MPI picks by process count and size), so the result is
//!   reproducible at a fixed world size only.
//! - **Invariant**: each rank first sums its own micro-shards into its subtrees of the
//!   fixed tree ([`super::tree`]); then an `all_to_all` gives rank `q` chunk `q` of every
//!   rank's subtree sums, rank `q` sums those chunks with the top of the tree, and an
//!   `all_gather` hands every rank every summed chunk. At a power-of-two world size
//!   (one subtree per rank) each rank sends `(W - 1) / W` of the buffer in each of the
//!   two collectives: the bytes of a ring all-reduce (reduce-scatter then all-gather),
//!   not a gather of every rank's whole gradient. Other world sizes give some ranks two
//!   or more subtrees (at most two per tree level), and their `all_to_all` share grows
//!   by that factor.

use tensor_core::Tensor;

use super::tree::{all_subtrees, check_layout, subtrees_of_rank, top_sum};
use crate::{even_counts, offsets, DistError, ProcessGroup, ReduceOp, Result};

/// The backend's all-reduce of `partial` (fast mode).
pub fn fast_sum(group: &dyn ProcessGroup, partial: &mut Tensor) -> Result<()> {
    group.all_reduce(partial, ReduceOp::Sum)
}

/// The sum over ranks, in the fixed tree's order, of `partials`: this rank's subtree
/// sums ([`subtrees_of_rank`]'s, in that order), each the same 1-D length. On every
/// rank.
///
/// Chunk `q` of every subtree sum goes to rank `q` (one `all_to_all`), rank `q` adds the
/// chunks of all ranks' subtrees with the top of the tree ([`top_sum`]), and an
/// `all_gather` hands every rank every summed chunk. A rank with one subtree (every
/// power-of-two world size) sends its partial as it is; a rank with several sends, for
/// each destination, that chunk of each of them in turn.
pub fn invariant_sum(
    group: &dyn ProcessGroup,
    micro_shards: usize,
    partials: &[Tensor],
) -> Result<Tensor> {
    const OP: &str = "invariant_sum";
    let (world, rank) = (group.world_size(), group.rank());
    check_layout(micro_shards, world)?;
    let counts: Vec<usize> = (0..world)
        .map(|q| subtrees_of_rank(q, world, micro_shards).len())
        .collect();
    let n = partials.first().map_or(0, Tensor::elem_count);
    if partials.len() != counts[rank] || partials.iter().any(|p| p.elem_count() != n) {
        return Err(DistError::invalid(
            OP,
            format!(
                "rank {rank} of {world} holds {} subtrees of {micro_shards} micro-shards, so it \
                 passes {} partial sums of one length, got {} of lengths {:?}",
                counts[rank],
                counts[rank],
                partials.len(),
                partials.iter().map(Tensor::elem_count).collect::<Vec<_>>()
            ),
        ));
    }
    let first = &partials[0];
    if world == 1 {
        // The top of the tree over one leaf is that leaf: nothing to add or move.
        return Ok(first.clone());
    }
    let chunks = even_counts(n, world);
    let starts = offsets(&chunks);
    let mine = chunks[rank];
    // Output tensors only give the size and dtype (collectives replace their values),
    // so `first` itself serves wherever the sizes match: no buffer to allocate and
    // zero (first-touching a fresh 16 MiB costs milliseconds on the bench machine).
    let placeholder = |len: usize| -> Result<Tensor> {
        if len == n {
            Ok(first.clone())
        } else {
            Ok(Tensor::zeros(&[len], first.dtype(), first.device())?)
        }
    };
    // Chunk q of every subtree sum goes to rank q, destination by destination.
    let send = if partials.len() == 1 {
        first.clone()
    } else {
        let mut pieces = Vec::with_capacity(world * partials.len());
        for q in 0..world {
            for p in partials {
                pieces.push(p.narrow(0, starts[q], chunks[q])?);
            }
        }
        Tensor::cat(&pieces, 0)?
    };
    let send_counts: Vec<usize> = chunks.iter().map(|c| c * partials.len()).collect();
    let receive_counts: Vec<usize> = counts.iter().map(|k| k * mine).collect();
    let mut received = placeholder(receive_counts.iter().sum())?;
    group.all_to_all(&mut received, &send, &receive_counts, &send_counts)?;
    // Rank by rank, each rank's subtrees in turn: the leaf-line order top_sum walks.
    let roots = all_subtrees(world, micro_shards);
    let summed = top_sum(&roots, &mut |k| {
        Ok(received.narrow(0, k * mine, mine)?.contiguous()?)
    })?;
    let mut full = placeholder(n)?;
    group.all_gather(&mut full, &summed, &chunks)?;
    Ok(full)
}
