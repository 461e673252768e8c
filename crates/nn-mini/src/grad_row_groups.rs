//! `GradRowGroups`: consecutive runs of a batch's rows whose parameter gradients a caller
//! wants separately, from one backward pass.
//!
//! Why: a world-size-invariant data parallel step (docs/contract.md §9.3) needs each
//! micro-shard's parameter gradient on its own, so that the shards can be summed in one
//! fixed tree. Computing each shard in its own forward and backward costs a pass per
//! shard. But when every row's output and input gradient do not depend on which other
//! rows share the batch (portable arithmetic, docs/contract.md §14, makes each matmul
//! output element one fixed chain over its own row), only the parameter gradients mix
//! rows. So one forward and one backward over the whole batch can serve every shard,
//! provided each layer computes its parameter gradient per group, from exactly the rows
//! (and with exactly the ops) a pass over that group alone would use.
//!
//! A layer opts in with [`Module::supports_grad_row_groups`](crate::Module::supports_grad_row_groups)
//! and learns the groups through [`Module::set_grad_row_groups`](crate::Module::set_grad_row_groups);
//! while they are set, its backward adds group `g`'s parameter gradient into
//! [`Parameter::group_grads`](crate::Parameter::group_grads)`[g]` instead of
//! [`Parameter::grad`](crate::Parameter::grad).

use std::ops::Range;
use std::sync::Arc;

use tensor_core::Tensor;

use crate::{NnError, Result};

/// A batch of rows cut into consecutive groups: group `g` is rows
/// `offset(g) .. offset(g) + size(g)`. Groups may be empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GradRowGroups {
    /// `offsets[g]..offsets[g + 1]` is group `g`; `offsets[0] == 0`.
    offsets: Arc<[usize]>,
}

impl GradRowGroups {
    /// Groups of `sizes[g]` rows each, in order; the batch has `sizes.iter().sum()` rows.
    pub fn new(sizes: &[usize]) -> Result<Self> {
        let mut offsets = Vec::with_capacity(sizes.len() + 1);
        offsets.push(0usize);
        let mut end = 0usize;
        for &size in sizes {
            end = end.checked_add(size).ok_or_else(|| {
                NnError::invalid("GradRowGroups::new", "the group sizes overflow usize")
            })?;
            offsets.push(end);
        }
        Ok(GradRowGroups {
            offsets: offsets.into(),
        })
    }

    /// Number of groups.
    #[must_use]
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// True when there are no groups.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows in the whole batch.
    #[must_use]
    pub fn rows(&self) -> usize {
        self.offsets[self.len()]
    }

    /// The rows of group `g` (`g < len()`).
    #[must_use]
    pub fn range(&self, g: usize) -> Range<usize> {
        self.offsets[g]..self.offsets[g + 1]
    }

    /// Every group's rows, in order.
    pub fn ranges(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        (0..self.len()).map(|g| self.range(g))
    }

    /// Each group's rows of `t` (dim 0), as views, after checking that `t` has the
    /// batch's rows; `op` names the caller in the error.
    pub fn split(&self, t: &Tensor, op: &'static str) -> Result<Vec<Tensor>> {
        if t.dims().first() != Some(&self.rows()) {
            return Err(NnError::invalid(
                op,
                format!(
                    "gradient row groups cover {} rows, the tensor is {:?}",
                    self.rows(),
                    t.dims()
                ),
            ));
        }
        self.ranges()
            .map(|r| Ok(t.narrow(0, r.start, r.len())?))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensor_core::Device;

    #[test]
    fn groups_are_consecutive_runs() {
        let groups = GradRowGroups::new(&[2, 0, 3]).unwrap();
        assert_eq!(groups.len(), 3);
        assert_eq!(groups.rows(), 5);
        assert_eq!(groups.ranges().collect::<Vec<_>>(), [0..2, 2..2, 2..5]);
        let t =
            Tensor::from_vec((0..10).map(|v| v as f32).collect(), &[5, 2], Device::Cpu).unwrap();
        let parts = groups.split(&t, "test").unwrap();
        assert_eq!(parts[1].dims(), [0, 2]);
        assert_eq!(
            parts[2].to_vec::<f32>().unwrap(),
            [4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
        );
        let short = t.narrow(0, 0, 4).unwrap();
        assert!(groups.split(&short, "test").is_err());
        assert!(GradRowGroups::new(&[usize::MAX, 1]).is_err());
    }
}
