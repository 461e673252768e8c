//! Dimensions of a tensor, with the element count checked once at construction.

use crate::{Result, TensorError};

/// The dimensions of a tensor. Constructing one checks that the element count fits in
/// `usize`, so code holding a `Shape` can multiply dimensions without overflow checks.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Shape {
    dims: Vec<usize>,
    elem_count: usize,
}

impl Shape {
    /// A shape from its dimensions; errors if the product of its non-zero dimensions
    /// overflows `usize`.
    ///
    /// Why ignore zeros? A shape such as `[0, usize::MAX, 2]` has no elements, but its
    /// contiguous strides (`[2 * usize::MAX, 2, 1]`) still overflow, and whether a shape
    /// is accepted must not depend on where its zero sits (`[usize::MAX, 2, 0]` and
    /// `[0, usize::MAX, 2]` are refused alike).
    pub fn new(dims: &[usize]) -> Result<Self> {
        let overflow = || TensorError::ShapeOverflow {
            dims: dims.to_vec(),
        };
        dims.iter()
            .filter(|&&d| d != 0)
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(overflow)?;
        let elem_count = if dims.contains(&0) {
            0
        } else {
            dims.iter().product()
        };
        Ok(Shape {
            dims: dims.to_vec(),
            elem_count,
        })
    }

    /// The dimensions.
    #[must_use]
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Number of dimensions.
    #[must_use]
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Number of elements (1 for a scalar of rank 0).
    #[must_use]
    pub fn elem_count(&self) -> usize {
        self.elem_count
    }

    /// Row-major (C order) strides in elements.
    #[must_use]
    pub fn contiguous_strides(&self) -> Vec<usize> {
        let mut strides = vec![0; self.dims.len()];
        let mut acc = 1;
        for (stride, &dim) in strides.iter_mut().zip(&self.dims).rev() {
            *stride = acc;
            acc *= dim;
        }
        strides
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_strides() {
        let s = Shape::new(&[2, 3, 4]).unwrap();
        assert_eq!(s.elem_count(), 24);
        assert_eq!(s.contiguous_strides(), vec![12, 4, 1]);
        assert_eq!(Shape::new(&[]).unwrap().elem_count(), 1);
        assert_eq!(Shape::new(&[3, 0]).unwrap().elem_count(), 0);
    }

    #[test]
    fn overflow_is_an_error() {
        let err = Shape::new(&[usize::MAX, 2]).unwrap_err();
        assert!(matches!(err, TensorError::ShapeOverflow { .. }));
        // Zero elements, but strides that overflow: refused wherever the zero sits.
        for dims in [[usize::MAX, 2, 0], [0, usize::MAX, 2], [usize::MAX, 0, 2]] {
            assert!(
                matches!(Shape::new(&dims), Err(TensorError::ShapeOverflow { .. })),
                "{dims:?}"
            );
        }
        let empty = Shape::new(&[0, usize::MAX]).unwrap();
        assert_eq!(empty.elem_count(), 0);
        assert_eq!(empty.contiguous_strides(), vec![usize::MAX, 1]);
    }
}
