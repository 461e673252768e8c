//! The one fixed order in which micro-shard gradients are summed, whatever the number
//! of ranks, and which ranks hold which parts of it.
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
//! **Which rank holds what.** Read the leaves left to right (the *leaf line*; for S = 8
//! `g0 g4 g2 g6 g1 g5 g3 g7`: position `p` holds shard `p` with its bits reversed) and
//! cut the line into `W` consecutive pieces, `ceil(S / W)` leaves for the first
//! `S mod W` ranks and `floor(S / W)` for the rest, rank 0 first. Rank `r` holds the
//! rows of its piece's shards. A consecutive piece of the line is a union of complete
//! subtrees (at most two per level, like a segment tree's cover), so each rank sums
//! its own subtrees locally ([`subtrees_of_rank`]), and the top of the tree, from all
//! ranks' subtree roots, is the same tree walked down only to those roots
//! ([`top_sum`]). Every world size `1..=S` computes the very same additions in the very
//! same association: parameters and losses are bit-identical to one rank's.
//!
//! For `W` a power of two each piece is one subtree `T(c, W)` and the ranks hold the
//! residue classes of `W` (rank 1 of 4 holds `T(2, 4)`, shards 2 and 6). Other world
//! sizes differ by at most one shard between ranks: S = 8 on 3 ranks is 3, 3 and 2
//! shards (`g0 g4 | g2`, `g6 | g1 g5`, `g3 g7`), so the largest rank has 3/8 of the rows
//! where an even share is 1/3.

use tensor_core::Tensor;

use crate::{DistError, Result};

/// A node `T(c, m)` of the fixed tree: the sum of the shards `s` with `s % m == c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Subtree {
    /// `c`, the residue class (`c < m`).
    pub class: usize,
    /// `m`, a power of two: the node's depth is `log2 m`, its leaves number `S / m`.
    pub modulus: usize,
}

/// Checks that `micro_shards` is a power of two and that every rank of `world_size`
/// gets at least one of them (`1 <= world_size <= micro_shards`).
pub fn check_layout(micro_shards: usize, world_size: usize) -> Result<()> {
    if !micro_shards.is_power_of_two() {
        return Err(DistError::invalid(
            "invariant mode",
            format!("the number of micro-shards must be a power of two, got {micro_shards}"),
        ));
    }
    if world_size == 0 {
        return Err(DistError::invalid(
            "invariant mode",
            "the world size must be at least 1, got 0",
        ));
    }
    if world_size > micro_shards {
        return Err(DistError::TooManyRanks {
            world_size,
            micro_shards,
        });
    }
    Ok(())
}

/// The shard at position `position` of the leaf line: `position`'s `log2 S` bits
/// reversed.
fn shard_at(position: usize, micro_shards: usize) -> usize {
    match micro_shards.trailing_zeros() {
        0 => 0,
        bits => position.reverse_bits() >> (usize::BITS - bits),
    }
}

/// Rank `rank`'s piece of the leaf line, longer pieces first.
fn piece(rank: usize, world_size: usize, micro_shards: usize) -> std::ops::Range<usize> {
    let (base, longer) = (micro_shards / world_size, micro_shards % world_size);
    let start = rank * base + rank.min(longer);
    start..start + base + usize::from(rank < longer)
}

/// The shards rank `rank` of `world_size` holds, in leaf-line order (any order would do
/// for the sum; this one is the rank's local row order). The layout must pass
/// [`check_layout`].
#[must_use]
pub fn shards_of_rank(rank: usize, world_size: usize, micro_shards: usize) -> Vec<usize> {
    piece(rank, world_size, micro_shards)
        .map(|p| shard_at(p, micro_shards))
        .collect()
}

/// The complete subtrees whose leaves are exactly rank `rank`'s shards, fewest first
/// and in leaf-line order: the largest aligned runs of its piece of the line.
#[must_use]
pub fn subtrees_of_rank(rank: usize, world_size: usize, micro_shards: usize) -> Vec<Subtree> {
    let range = piece(rank, world_size, micro_shards);
    let mut subtrees = Vec::new();
    let mut p = range.start;
    while p < range.end {
        // The longest run starting at p that a subtree covers: aligned to its length.
        let mut len = if p == 0 {
            micro_shards
        } else {
            1 << p.trailing_zeros()
        };
        while p + len > range.end {
            len /= 2;
        }
        let modulus = micro_shards / len;
        subtrees.push(Subtree {
            class: shard_at(p, micro_shards) % modulus,
            modulus,
        });
        p += len;
    }
    subtrees
}

/// Every rank's subtrees, rank 0's first: the leaf-line order, which is the order in
/// which [`top_sum`] visits them.
#[must_use]
pub fn all_subtrees(world_size: usize, micro_shards: usize) -> Vec<Subtree> {
    (0..world_size)
        .flat_map(|r| subtrees_of_rank(r, world_size, micro_shards))
        .collect()
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
    sum_subtree(c, m, leaf_level, leaf, &|left, right| Ok(left.add(&right)?))
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
    sum_subtree(c, m, leaf_level, leaf, &|mut left, right| {
        left.add_(&right)?;
        Ok(left)
    })
}

/// `T(c, m)` over `leaf(class)` leaves at `leaf_level`, each node `combine(left, right)`:
/// the one walk behind [`subtree_sum`] and [`subtree_sum_in_place`], which differ only in
/// how a node adds.
fn sum_subtree(
    c: usize,
    m: usize,
    leaf_level: usize,
    leaf: &mut dyn FnMut(usize) -> Result<Tensor>,
    combine: &dyn Fn(Tensor, Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let node = Subtree {
        class: c,
        modulus: m,
    };
    walk_tree(
        node,
        &|n| n.modulus >= leaf_level,
        &mut |n| leaf(n.class),
        combine,
    )
}

/// The whole tree `T(0, 1)` walked down to `roots` (a partition of the leaves into
/// subtrees in leaf-line order, as [`all_subtrees`] gives): `leaf(k)` is the sum of
/// `roots[k]`. The top of the tree over every rank's partial sums.
pub fn top_sum(roots: &[Subtree], leaf: &mut dyn FnMut(usize) -> Result<Tensor>) -> Result<Tensor> {
    let mut next = 0;
    let root = Subtree {
        class: 0,
        modulus: 1,
    };
    // Below the deepest root there is nothing to find: stop there (and fail) rather than
    // walk on when `roots` is not a partition.
    let deepest = roots.iter().map(|n| n.modulus).max().unwrap_or(1);
    let sum = walk_tree(
        root,
        &|n| n.modulus >= deepest || roots.contains(&n),
        &mut |n| {
            // A depth-first, left-first walk meets a partition's parts in line order.
            if roots.get(next) != Some(&n) {
                return Err(not_a_partition(roots));
            }
            next += 1;
            leaf(next - 1)
        },
        &|left, right| Ok(left.add(&right)?),
    )?;
    if next != roots.len() {
        return Err(not_a_partition(roots));
    }
    Ok(sum)
}

fn not_a_partition(roots: &[Subtree]) -> DistError {
    DistError::invalid(
        "invariant mode",
        format!("the subtrees {roots:?} are not the fixed tree's leaves cut in leaf-line order"),
    )
}

/// The one walk every sum shares, so they cannot drift apart in association: a node
/// where `is_leaf` holds is `leaf(node)`; any other node `T(c, m)` is its left subtree
/// `T(c, 2m)` first, then its right one `T(c + m, 2m)`, joined by `combine`.
fn walk_tree(
    node: Subtree,
    is_leaf: &dyn Fn(Subtree) -> bool,
    leaf: &mut dyn FnMut(Subtree) -> Result<Tensor>,
    combine: &dyn Fn(Tensor, Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    if is_leaf(node) {
        return leaf(node);
    }
    let Subtree { class, modulus } = node;
    let half = |class| Subtree {
        class,
        modulus: 2 * modulus,
    };
    let left = walk_tree(half(class), is_leaf, leaf, combine)?;
    let right = walk_tree(half(class + modulus), is_leaf, leaf, combine)?;
    combine(left, right)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensor_core::Device;

    fn leaf(s: usize) -> Tensor {
        // Magnitudes far apart, so a different association changes the bits.
        let v = [1e8f32, 1.0, -1e8, 0.5, 3e-3, 7e-4, -2e-3, 0.25][s % 8] * (1 + s / 8) as f32;
        Tensor::from_vec(vec![v, -v * 0.3], &[2], Device::Cpu).unwrap()
    }

    fn bits(t: &Tensor) -> Vec<u64> {
        t.to_bits().unwrap()
    }

    /// The tree is the documented one for S = 8.
    #[test]
    fn the_tree_for_8_shards_is_the_documented_one() {
        let whole = subtree_sum(0, 1, 8, &mut |s| Ok(leaf(s))).unwrap();
        let sum = |ids: [usize; 2]| leaf(ids[0]).add(&leaf(ids[1])).unwrap();
        let (a, b, c, d) = (sum([0, 4]), sum([2, 6]), sum([1, 5]), sum([3, 7]));
        let expected = a.add(&b).unwrap().add(&c.add(&d).unwrap()).unwrap();
        assert_eq!(bits(&whole), bits(&expected));
        // The left-to-right sum differs, so the tests can tell orders apart.
        let serial = (1..8).fold(leaf(0), |acc, s| acc.add(&leaf(s)).unwrap());
        assert_ne!(bits(&serial), bits(&whole));
    }

    /// For every world size 1..=S (S = 1, 2, 4, 8, 16): the ranks' shards partition the
    /// shards evenly (sizes differ by at most one), each rank's subtrees cover exactly
    /// its shards, and the rank subtrees plus the top of the tree equal the whole tree,
    /// bit for bit, in place or not.
    #[test]
    fn every_world_size_composes_to_the_same_tree() {
        for shards in [1, 2, 4, 8, 16] {
            let whole = subtree_sum(0, 1, shards, &mut |s| Ok(leaf(s))).unwrap();
            for world in 1..=shards {
                check_layout(shards, world).unwrap();
                let mut seen = vec![0; shards];
                let mut sizes = Vec::new();
                let mut partials = Vec::new();
                for r in 0..world {
                    let mine = shards_of_rank(r, world, shards);
                    sizes.push(mine.len());
                    let mut covered = Vec::new();
                    for node in subtrees_of_rank(r, world, shards) {
                        partials.push(
                            subtree_sum_in_place(node.class, node.modulus, shards, &mut |s| {
                                covered.push(s);
                                Ok(leaf(s))
                            })
                            .unwrap(),
                        );
                    }
                    covered.sort_unstable();
                    let mut sorted = mine.clone();
                    sorted.sort_unstable();
                    assert_eq!(covered, sorted, "S {shards} world {world} rank {r}");
                    for s in mine {
                        seen[s] += 1;
                    }
                }
                assert!(seen.iter().all(|&n| n == 1), "S {shards} world {world}");
                let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(hi - lo <= 1, "S {shards} world {world}: {sizes:?}");
                let roots = all_subtrees(world, shards);
                assert_eq!(roots.len(), partials.len());
                let top = top_sum(&roots, &mut |k| Ok(partials[k].clone())).unwrap();
                assert_eq!(bits(&top), bits(&whole), "S {shards} world {world}");
            }
        }
    }

    /// Powers of two keep one subtree per rank, residue classes of `W`; 3 ranks of 8
    /// are the documented pieces.
    #[test]
    fn the_layouts_are_the_documented_ones() {
        for world in [1, 2, 4, 8] {
            for r in 0..world {
                let subtrees = subtrees_of_rank(r, world, 8);
                assert_eq!(subtrees.len(), 1);
                assert_eq!(subtrees[0].modulus, world);
            }
        }
        assert_eq!(shards_of_rank(1, 4, 8), [2, 6]);
        let three: Vec<Vec<usize>> = (0..3).map(|r| shards_of_rank(r, 3, 8)).collect();
        assert_eq!(three, [vec![0, 4, 2], vec![6, 1, 5], vec![3, 7]]);
        let t = |class, modulus| Subtree { class, modulus };
        assert_eq!(
            all_subtrees(3, 8),
            [t(0, 4), t(2, 8), t(6, 8), t(1, 4), t(3, 4)]
        );
    }

    #[test]
    fn layouts_outside_the_tree_are_refused() {
        assert!(check_layout(6, 2).is_err());
        assert!(check_layout(8, 0).is_err());
        let err = check_layout(8, 9).unwrap_err();
        assert!(
            matches!(
                err,
                DistError::TooManyRanks {
                    world_size: 9,
                    micro_shards: 8
                }
            ),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains('9') && text.contains('8'), "{text}");
        let t = |class, modulus| Subtree { class, modulus };
        let missing = top_sum(&[t(0, 2)], &mut |_| Ok(leaf(0)));
        assert!(missing.is_err());
        let misordered = top_sum(&[t(1, 2), t(0, 2)], &mut |_| Ok(leaf(0)));
        assert!(misordered.is_err());
    }
}
