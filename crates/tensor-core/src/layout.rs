//! Walking a strided view in row-major order.

/// Yields the storage index of every element of a strided view, in row-major order of
/// its logical shape. Each step costs O(1) amortised: the position is updated by adding
/// one stride (and subtracting the span of any dimensions that wrapped).
pub(crate) struct StridedIndex<'a> {
    dims: &'a [usize],
    strides: &'a [usize],
    index: Vec<usize>,
    position: usize,
    remaining: usize,
}

impl<'a> StridedIndex<'a> {
    /// Starts at `offset`, covering `dims` (whose product is the element count).
    pub(crate) fn new(dims: &'a [usize], strides: &'a [usize], offset: usize) -> Self {
        StridedIndex {
            dims,
            strides,
            index: vec![0; dims.len()],
            position: offset,
            remaining: dims.iter().product(),
        }
    }
}

impl Iterator for StridedIndex<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.remaining == 0 {
            return None;
        }
        let current = self.position;
        self.remaining -= 1;
        if self.remaining > 0 {
            for d in (0..self.dims.len()).rev() {
                self.index[d] += 1;
                if self.index[d] < self.dims[d] {
                    self.position += self.strides[d];
                    break;
                }
                self.index[d] = 0;
                self.position -= (self.dims[d] - 1) * self.strides[d];
            }
        }
        Some(current)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for StridedIndex<'_> {}

/// Appends the elements of the strided view (`dims`, `strides`, `offset`) of `values`
/// to `out`, in row-major order: what collecting [`StridedIndex`] gives, one innermost
/// row at a time (a slice copy when the row is dense, a fixed-stride loop otherwise)
/// instead of one iterator step per element. Head splits and transposes make these
/// copies several times per GPT layer, where the per-element walk was a twentieth of
/// a CPU step.
pub(crate) fn gather_strided<T: Copy>(
    values: &[T],
    dims: &[usize],
    strides: &[usize],
    offset: usize,
    out: &mut Vec<T>,
) {
    let Some((&len, outer)) = dims.split_last() else {
        out.push(values[offset]);
        return;
    };
    if len == 0 {
        return;
    }
    let stride = strides[strides.len() - 1];
    for start in StridedIndex::new(outer, &strides[..outer.len()], offset) {
        if stride == 1 {
            out.extend_from_slice(&values[start..start + len]);
        } else {
            out.extend((0..len).map(|j| values[start + j * stride]));
        }
    }
}

/// True when a view with these dims and strides is row-major with no gaps. Dimensions
/// of size 1 may have any stride (a transposed row vector is still contiguous).
pub(crate) fn is_contiguous(dims: &[usize], strides: &[usize]) -> bool {
    if dims.contains(&0) {
        return true;
    }
    let mut expected = 1;
    for (&dim, &stride) in dims.iter().zip(strides).rev() {
        if dim != 1 && stride != expected {
            return false;
        }
        expected *= dim;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_a_transposed_view() {
        // A 2x3 row-major buffer viewed as its 3x2 transpose.
        let got: Vec<usize> = StridedIndex::new(&[3, 2], &[1, 3], 0).collect();
        assert_eq!(got, vec![0, 3, 1, 4, 2, 5]);
        let got: Vec<usize> = StridedIndex::new(&[2, 2], &[3, 1], 1).collect();
        assert_eq!(got, vec![1, 2, 4, 5]);
        assert_eq!(StridedIndex::new(&[], &[], 7).collect::<Vec<_>>(), vec![7]);
        assert_eq!(StridedIndex::new(&[2, 0], &[1, 1], 0).count(), 0);
        let values: Vec<u32> = (0..24).collect();
        for (dims, strides, offset) in [
            (&[2, 3, 4][..], &[12, 4, 1][..], 0),
            (&[4, 3, 2][..], &[1, 4, 12][..], 0),
            (&[3, 2][..], &[4, 1][..], 5),
            (&[][..], &[][..], 7),
            (&[2, 0][..], &[1, 1][..], 0),
            (&[0, 2][..], &[1, 1][..], 0),
        ] {
            let mut got = Vec::new();
            gather_strided(&values, dims, strides, offset, &mut got);
            let expected: Vec<u32> = StridedIndex::new(dims, strides, offset)
                .map(|i| values[i])
                .collect();
            assert_eq!(got, expected, "{dims:?} {strides:?}");
        }
    }

    #[test]
    fn contiguity_ignores_unit_dims() {
        assert!(is_contiguous(&[2, 3], &[3, 1]));
        assert!(!is_contiguous(&[3, 2], &[1, 3]));
        assert!(is_contiguous(&[3, 1], &[1, 3]));
        assert!(is_contiguous(&[1, 3], &[1, 1]));
        assert!(is_contiguous(&[0, 3], &[9, 9]));
    }
}
