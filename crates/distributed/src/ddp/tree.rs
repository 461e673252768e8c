//! The one fixed order in which micro-shard gradients are summed, whatever the number
//! of ranks.
//!
//! There are `S` micro-shards (a power of two); shard `s` holds the global batch's rows
//! `i` with `i % S == s`. The sum is the balanced binary tree over residue classes:
//!
//! ```text
//! T(c, m) = g_c                          when m == S   (a leaf: shard c's gradient)
//! T(c, m) = T(c, 2m) + T(c + m, 2m)      otherwise
//! total   = T(0, 1)
//! ```
//!
//! For S = 8: `((g0 + g4) + (g2 + g6)) + ((g1 + g5) + (g3 + g7))`.
//!
//! Why residue classes? With `W` ranks (a power of two dividing `S`), rank `r` holds the
//! rows `i % W == r` of the global batch (PyTorch's `DistributedSampler` deals rows out
//! round-robin), hence exactly the shards `s % W == r`, and those are the leaves of the
//! subtree `T(r, W)`. So each rank sums its own shards into `T(r, W)` locally, and the
//! top of the tree, from the `W` values `T(q, W)`, is the same tree again with leaves at
//! level `W`. Every world size computes the very same additions in the very same
//! association: the parameters and losses of 1, 2 and 4 ranks are bit-identical.

use tensor_core::Tensor;

use crate::{DistError, Result};

/// Checks that `micro_shards` is a power of two and that `world_size` is a power of two
/// dividing it: the world sizes whose rank subtrees are subtrees of the fixed tree.
pub fn check_layout(micro_shards: usize, world_size: usize) -> Result<()> {
    if !micro_shards.is_power_of_two() {
        return Err(DistError::invalid(
            "invariant mode",
            format!("the number of micro-shards must be a power of two, got {micro_shards}"),
        ));
    }
    if !world_size.is_power_of_two() || world_size > micro_shards {
        return Err(DistError::invalid(
            "invariant mode",
            format!(
                "the world size must be a power of two no larger than the {micro_shards} \
                 micro-shards (so each rank's shards form a subtree of the fixed sum), got {world_size}"
            ),
        ));
    }
    Ok(())
}

/// `T(c, m)` with leaves at level `leaf_level`: `leaf(c)` when `m == leaf_level`, else
/// `T(c, 2m) + T(c + m, 2m)`. `leaf_level / m` must be a power of two.
pub fn subtree_sum(
    c: usize,
    m: usize,
    leaf_level: usize,
    leaf: &mut dyn FnMut(usize) -> Result<Tensor>,
) -> Result<Tensor> {
    // `add`, not `add_`: leaves are often views into a larger received buffer, and an
    // in-place add would first copy that whole shared buffer (copy-on-write).
    walk_tree(c, m, leaf_level, leaf, &|left, right| Ok(left.add(&right)?))
}

/// [`subtree_sum`] over leaves the caller hands over (owned, not views of a shared
/// buffer): each node adds its right subtree into its left one in place, the same
/// additions in the same association (`add_` gives `add`'s values), without a fresh
/// buffer per node.
pub fn subtree_sum_in_place(
    c: usize,
    m: usize,
    leaf_level: usize,
    leaf: &mut dyn FnMut(usize) -> Result<Tensor>,
) -> Result<Tensor> {
    walk_tree(c, m, leaf_level, leaf, &|mut left, right| {
        left.add_(&right)?;
        Ok(left)
    })
}

/// The one walk both sums share, so they cannot drift apart in association: the left
/// subtree `T(c, 2m)` first, then the right one `T(c + m, 2m)`, joined by `combine`.
fn walk_tree(
    c: usize,
    m: usize,
    leaf_level: usize,
    leaf: &mut dyn FnMut(usize) -> Result<Tensor>,
    combine: &dyn Fn(Tensor, Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    if m >= leaf_level {
        return leaf(c);
    }
    let left = walk_tree(c, 2 * m, leaf_level, leaf, combine)?;
    let right = walk_tree(c + m, 2 * m, leaf_level, leaf, combine)?;
    combine(left, right)
}

/// The shards rank `rank` of `world_size` holds, in the order its subtree visits them
/// (any order would do for the sum; this one is the rank's local row order).
#[must_use]
pub fn shards_of_rank(rank: usize, world_size: usize, micro_shards: usize) -> Vec<usize> {
    (rank..micro_shards).step_by(world_size).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensor_core::Device;

    fn leaf(s: usize) -> Tensor {
        // Magnitudes far apart, so a different association changes the bits.
        let v = [1e8f32, 1.0, -1e8, 0.5, 3e-3, 7e-4, -2e-3, 0.25][s % 8];
        Tensor::from_vec(vec![v, -v * 0.3], &[2], Device::Cpu).unwrap()
    }

    fn bits(t: &Tensor) -> Vec<u64> {
        t.to_bits().unwrap()
    }

    /// Rank subtrees plus the top tree equal the whole tree, bit for bit, for every
    /// power-of-two world size, and the tree is the documented one for S = 8.
    #[test]
    fn rank_subtrees_compose_to_the_same_tree() {
        let shards = 8;
        let whole = subtree_sum(0, 1, shards, &mut |s| Ok(leaf(s))).unwrap();
        let sum = |ids: [usize; 2]| leaf(ids[0]).add(&leaf(ids[1])).unwrap();
        let (a, b, c, d) = (sum([0, 4]), sum([2, 6]), sum([1, 5]), sum([3, 7]));
        let expected = a.add(&b).unwrap().add(&c.add(&d).unwrap()).unwrap();
        assert_eq!(bits(&whole), bits(&expected));
        for world in [1, 2, 4, 8] {
            check_layout(shards, world).unwrap();
            let partials: Vec<Tensor> = (0..world)
                .map(|r| {
                    subtree_sum(r, world, shards, &mut |s| {
                        assert_eq!(s % world, r, "a rank only touches its own shards");
                        Ok(leaf(s))
                    })
                    .unwrap()
                })
                .collect();
            let top = subtree_sum(0, 1, world, &mut |q| Ok(partials[q].clone())).unwrap();
            assert_eq!(bits(&top), bits(&whole), "world {world}");
            let in_place = subtree_sum_in_place(0, 1, world, &mut |q| {
                subtree_sum_in_place(q, world, shards, &mut |s| Ok(leaf(s)))
            })
            .unwrap();
            assert_eq!(bits(&in_place), bits(&whole), "in place, world {world}");
        }
        // The left-to-right sum differs, so the test can tell orders apart.
        let serial = (1..8).fold(leaf(0), |acc, s| acc.add(&leaf(s)).unwrap());
        assert_ne!(bits(&serial), bits(&whole));
    }

    #[test]
    fn layouts_outside_the_tree_are_refused() {
        assert!(check_layout(6, 2).is_err());
        assert!(check_layout(8, 3).is_err());
        assert!(check_layout(8, 16).is_err());
        assert!(check_layout(8, 8).is_ok());
        assert_eq!(shards_of_rank(1, 4, 8), [1, 5]);
    }
}
