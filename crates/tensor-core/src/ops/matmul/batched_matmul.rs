//! Batched matrix products on the CPU: `[..., m, k] x [..., k, n]`, one 2-D product per
//! index of the leading (batch) dimensions, as attention's `q k^T` and `p v` need
//! (`torch.matmul` of two tensors of the same rank, without broadcasting).
//!
//! Each batch entry is exactly the 2-D [`Tensor::matmul`] of its two matrices: gemm
//! (on blocks fixed by the sizes, see `ops/matmul/gemm_blocks.rs`) or, under portable arithmetic, ditto's own
//! kernels (docs/contract.md §14). Entries are independent, so they run on rayon in
//! parallel without changing a bit. Operands are read through their strides (a
//! `transpose` of the last two dimensions, or of a batch dimension, is never copied).

use rayon::prelude::*;

use crate::ops::matmul::product::{product_2d, ProductElement};
use crate::portable::matmul::Operand;
use crate::{Element, Result, Tensor, TensorError};

/// The storage offset of batch entry `b` (row-major over `batch_dims`) of `t`.
fn entry_offset(t: &Tensor, batch_dims: &[usize], mut b: usize) -> usize {
    let mut offset = t.storage_offset();
    for (d, &size) in batch_dims.iter().enumerate().rev() {
        offset += (b % size) * t.strides()[d];
        b /= size;
    }
    offset
}

/// Batch entry `b` of `t` (`[..., rows, cols]`) as a 2-D operand over `data`.
fn entry<'a, T>(t: &Tensor, data: &'a [T], batch_dims: &[usize], b: usize) -> Operand<'a, T> {
    let rank = t.rank();
    Operand {
        data,
        offset: entry_offset(t, batch_dims, b),
        rows: t.dims()[rank - 2],
        cols: t.dims()[rank - 1],
        row_stride: t.strides()[rank - 2],
        col_stride: t.strides()[rank - 1],
    }
}

/// Checks two operands of a batched product: the same rank (at least 3), the same
/// leading dimensions, and inner dimensions that agree. Returns the output dims.
pub(crate) fn batched_dims(op: &'static str, lhs: &Tensor, rhs: &Tensor) -> Result<Vec<usize>> {
    let (l, r) = (lhs.dims(), rhs.dims());
    let rank = l.len();
    if r.len() != rank {
        return Err(TensorError::RankMismatch {
            op,
            expected: rank,
            got: r.len(),
        });
    }
    if l[..rank - 2] != r[..rank - 2] || l[rank - 1] != r[rank - 2] {
        return Err(TensorError::ShapeMismatch {
            op,
            lhs: l.to_vec(),
            rhs: r.to_vec(),
        });
    }
    let mut out = l[..rank - 1].to_vec();
    out.push(r[rank - 1]);
    Ok(out)
}

/// The batched product of CPU tensors `lhs` `[..., m, k]` and `rhs` `[..., k, n]` whose
/// dims [`batched_dims`] accepted, as a contiguous `[..., m, n]` tensor.
pub(crate) fn batched_matmul_cpu<T: ProductElement>(
    lhs: &Tensor,
    rhs: &Tensor,
    out_dims: &[usize],
    portable: bool,
) -> Result<Tensor> {
    let rank = out_dims.len();
    let batch_dims = &out_dims[..rank - 2];
    let (m, n) = (out_dims[rank - 2], out_dims[rank - 1]);
    let count = crate::Shape::new(out_dims)?.elem_count();
    let mut out = crate::creation::try_filled(count, T::default(), <T as Element>::DTYPE)?;
    if count > 0 {
        let (a, b) = (T::slice_of(lhs)?, T::slice_of(rhs)?);
        out.par_chunks_mut(m * n)
            .enumerate()
            .try_for_each(|(entry_index, dst)| -> Result<()> {
                let x = entry(lhs, a, batch_dims, entry_index);
                let y = entry(rhs, b, batch_dims, entry_index);
                dst.copy_from_slice(&product_2d(x, y, portable)?);
                Ok(())
            })?;
    }
    Tensor::from_cpu_storage(T::into_storage(out), out_dims)
}

#[cfg(test)]
mod tests {
    use super::batched_matmul_cpu;
    use crate::portable::matmul::Operand;
    use crate::{DType, Device, Tensor, TensorError};

    fn values(n: usize, seed: f64) -> Vec<f32> {
        (0..n).map(|i| ((i as f64 * seed).sin()) as f32).collect()
    }

    #[test]
    fn each_entry_is_the_two_dimensional_product() {
        let a = Tensor::from_vec(values(2 * 3 * 4 * 5, 0.7), &[2, 3, 4, 5], Device::Cpu).unwrap();
        let b = Tensor::from_vec(values(2 * 3 * 5 * 6, 1.3), &[2, 3, 5, 6], Device::Cpu).unwrap();
        let c = a.matmul(&b).unwrap();
        assert_eq!(c.dims(), &[2, 3, 4, 6]);
        let c = c.to_vec::<f32>().unwrap();
        for i in 0..2 {
            for j in 0..3 {
                let ai = a
                    .narrow(0, i, 1)
                    .unwrap()
                    .narrow(1, j, 1)
                    .unwrap()
                    .reshape(&[4, 5])
                    .unwrap();
                let bi = b
                    .narrow(0, i, 1)
                    .unwrap()
                    .narrow(1, j, 1)
                    .unwrap()
                    .reshape(&[5, 6])
                    .unwrap();
                let want = ai.matmul(&bi).unwrap().to_vec::<f32>().unwrap();
                let at = (i * 3 + j) * 24;
                assert_eq!(&c[at..at + 24], &want[..], "entry ({i}, {j})");
            }
        }
        // A transposed view of the last two dims is read in place: each entry is the 2-D
        // product of that view (gemm's order depends on the layout, so the bits are the
        // view's, not the contiguous matrix's).
        let bt = b
            .transpose(2, 3)
            .unwrap()
            .contiguous()
            .unwrap()
            .transpose(2, 3)
            .unwrap();
        let ct = a.matmul(&bt).unwrap().to_vec::<f32>().unwrap();
        let a0 = a
            .narrow(0, 1, 1)
            .unwrap()
            .narrow(1, 2, 1)
            .unwrap()
            .reshape(&[4, 5])
            .unwrap();
        let bt0 = bt.narrow(0, 1, 1).unwrap().narrow(1, 2, 1).unwrap();
        let bt0 = bt0
            .transpose(2, 3)
            .unwrap()
            .reshape(&[6, 5])
            .unwrap()
            .t()
            .unwrap();
        let want = a0.matmul(&bt0).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(&ct[5 * 24..6 * 24], &want[..]);
        for (x, y) in ct.iter().zip(&c) {
            assert!((x - y).abs() < 1e-5);
        }
        // Transposed batch dims: every entry keeps its layout, so its bits.
        let swapped = a.transpose(0, 1).unwrap();
        let bs = b.transpose(0, 1).unwrap();
        let cs = swapped.matmul(&bs).unwrap();
        let back = cs.transpose(0, 1).unwrap().contiguous().unwrap();
        assert_eq!(back.to_vec::<f32>().unwrap(), c);
    }

    #[test]
    fn portable_entries_equal_portable_two_dimensional_products() {
        // Straight through the CPU path with portable kernels (the process-wide switch
        // is left alone: other tests of this binary run concurrently).
        let a = Tensor::from_vec(values(3 * 7 * 9, 0.3), &[3, 7, 9], Device::Cpu).unwrap();
        let b = Tensor::from_vec(values(3 * 9 * 2, 0.9), &[3, 9, 2], Device::Cpu).unwrap();
        let c = batched_matmul_cpu::<f32>(&a, &b, &[3, 7, 2], true).unwrap();
        let c = c.to_vec::<f32>().unwrap();
        let (x, y) = (a.as_slice::<f32>().unwrap(), b.as_slice::<f32>().unwrap());
        let first = Operand {
            data: x,
            offset: 63,
            rows: 7,
            cols: 9,
            row_stride: 9,
            col_stride: 1,
        };
        let second = Operand {
            data: y,
            offset: 18,
            rows: 9,
            cols: 2,
            row_stride: 2,
            col_stride: 1,
        };
        let want = crate::portable::matmul::matmul(first, second).unwrap();
        assert_eq!(&c[14..28], &want[..]);
    }

    #[test]
    fn shapes_must_agree() {
        let a = Tensor::zeros(&[2, 3, 4], DType::F32, Device::Cpu).unwrap();
        let b = Tensor::zeros(&[3, 4, 5], DType::F32, Device::Cpu).unwrap();
        assert!(matches!(
            a.matmul(&b),
            Err(TensorError::ShapeMismatch { .. })
        ));
        let c = Tensor::zeros(&[4, 5], DType::F32, Device::Cpu).unwrap();
        assert!(matches!(
            a.matmul(&c),
            Err(TensorError::RankMismatch { .. })
        ));
        let empty = Tensor::zeros(&[0, 3, 4], DType::F32, Device::Cpu).unwrap();
        let e = empty.matmul(&Tensor::zeros(&[0, 4, 2], DType::F32, Device::Cpu).unwrap());
        assert_eq!(e.unwrap().dims(), &[0, 3, 2]);
    }
}
