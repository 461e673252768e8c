//! Broadcasting elementwise arithmetic: `add`, `sub`, `mul`, `div`.
//!
//! Shapes broadcast by NumPy's rules: align the dims on the right; each pair must be
//! equal or contain a 1 (a missing leading dim counts as 1); the result takes the larger.
//! Each output element is one IEEE-754 operation on the two inputs.

use std::mem::MaybeUninit;

use crate::creation::try_with_capacity;
use crate::layout::StridedIndex;
use crate::ops::{build, Float, PAR_MIN_LEN};
use crate::{Result, Shape, Tensor, TensorError};

/// The broadcast result dims of `lhs` and `rhs`, or `ShapeMismatch` naming `op`.
pub(crate) fn broadcast_dims(op: &'static str, lhs: &[usize], rhs: &[usize]) -> Result<Vec<usize>> {
    let rank = lhs.len().max(rhs.len());
    let at = |dims: &[usize], i: usize| {
        // Dimension `i` of the right-aligned, 1-padded dims.
        (i + dims.len()).checked_sub(rank).map_or(1, |j| dims[j])
    };
    (0..rank)
        .map(|i| match (at(lhs, i), at(rhs, i)) {
            (a, b) if a == b || b == 1 => Ok(a),
            (1, b) => Ok(b),
            _ => Err(TensorError::ShapeMismatch {
                op,
                lhs: lhs.to_vec(),
                rhs: rhs.to_vec(),
            }),
        })
        .collect()
}

/// Strides that read `t` as if it had dims `out` (stride 0 along broadcast dims).
pub(crate) fn broadcast_strides(t: &Tensor, out: &[usize]) -> Vec<usize> {
    let pad = out.len() - t.rank();
    (0..out.len())
        .map(|i| match i.checked_sub(pad) {
            Some(j) if t.dims()[j] == out[i] => t.strides()[j],
            _ => 0,
        })
        .collect()
}

/// `Some(len)` when `t` is contiguous and its dims, less leading 1s, are the last dims of
/// `out`: then output element `i` (row-major) reads element `i % len` of `t`. Covers a
/// same-shape operand (`len` = the output's element count), a row vector broadcast over
/// rows (`len` = the row length) and a one-element tensor (`len` = 1).
pub(crate) fn suffix_len(t: &Tensor, out: &[usize]) -> Option<usize> {
    if !t.is_contiguous() {
        return None;
    }
    let dims = t.dims();
    let rest = &dims[dims.iter().take_while(|&&d| d == 1).count()..];
    let tail = out.len().checked_sub(rest.len())?;
    (out[tail..] == *rest).then(|| rest.iter().product())
}

/// The fast path of [`zip_with`]: `lhs` and `rhs` contiguous, one of them covering the
/// output and the other the same shape, a broadcast row (suffix) or a single element.
/// `None` when the layout does not fit. Same IEEE operation per element as the general
/// path, so the same bits.
fn zip_contiguous<T: Float>(
    lhs: &Tensor,
    rhs: &Tensor,
    out_dims: &[usize],
    count: usize,
    f: &(impl Fn(T, T) -> T + Sync),
) -> Result<Option<Vec<T>>> {
    let (Some(la), Some(lb)) = (suffix_len(lhs, out_dims), suffix_len(rhs, out_dims)) else {
        return Ok(None);
    };
    if count == 0 {
        return Ok(None);
    }
    let (a, b) = (lhs.as_slice::<T>()?, rhs.as_slice::<T>()?);
    let out = if la == count && lb == count {
        build(count, 1, PAR_MIN_LEN, |start, dst| {
            let (a, b) = (&a[start..], &b[start..]);
            for ((d, &x), &y) in dst.iter_mut().zip(a).zip(b) {
                d.write(f(x, y));
            }
        })?
    } else if la == count {
        build(count, lb, PAR_MIN_LEN, |start, dst| {
            fill_rows(dst, &a[start..], b, f);
        })?
    } else if lb == count {
        build(count, la, PAR_MIN_LEN, |start, dst| {
            fill_rows(dst, &b[start..], a, |y, x| f(x, y));
        })?
    } else {
        return Ok(None);
    };
    Ok(Some(out))
}

/// `dst[r * n + j] = g(full[r * n + j], row[j])` where `n = row.len()` divides `dst.len()`.
fn fill_rows<T: Float>(dst: &mut [MaybeUninit<T>], full: &[T], row: &[T], g: impl Fn(T, T) -> T) {
    if let [s] = *row {
        for (d, &x) in dst.iter_mut().zip(full) {
            d.write(g(x, s));
        }
        return;
    }
    let n = row.len();
    for (d, x) in dst.chunks_exact_mut(n).zip(full.chunks_exact(n)) {
        for ((d, &x), &y) in d.iter_mut().zip(x).zip(row) {
            d.write(g(x, y));
        }
    }
}

/// Applies `f` elementwise to `lhs` and `rhs` broadcast to a common shape.
fn zip_with<T: Float>(
    op: &'static str,
    lhs: &Tensor,
    rhs: &Tensor,
    f: impl Fn(T, T) -> T + Sync,
) -> Result<Tensor> {
    let out_dims = broadcast_dims(op, lhs.dims(), rhs.dims())?;
    let count = Shape::new(&out_dims)?.elem_count();
    if let Some(out) = zip_contiguous(lhs, rhs, &out_dims, count, &f)? {
        return Tensor::from_cpu_storage(T::into_storage(out), &out_dims);
    }
    zip_strided(lhs, rhs, &out_dims, count, f)
}

/// The general path of [`zip_with`]: walks both operands' strided, broadcast indices.
fn zip_strided<T: Float>(
    lhs: &Tensor,
    rhs: &Tensor,
    out_dims: &[usize],
    count: usize,
    f: impl Fn(T, T) -> T,
) -> Result<Tensor> {
    let a = T::slice(lhs.cpu_storage()?).expect("dtype checked by caller");
    let b = T::slice(rhs.cpu_storage()?).expect("dtype checked by caller");
    let (sa, sb) = (
        broadcast_strides(lhs, out_dims),
        broadcast_strides(rhs, out_dims),
    );
    let ia = StridedIndex::new(out_dims, &sa, lhs.storage_offset());
    let ib = StridedIndex::new(out_dims, &sb, rhs.storage_offset());
    let mut out = try_with_capacity(count, T::DTYPE)?;
    out.extend(ia.zip(ib).map(|(i, j)| f(a[i], b[j])));
    Tensor::from_cpu_storage(T::into_storage(out), out_dims)
}

/// The four arithmetic operators; the numbers are `DITTO_ADD` .. `DITTO_DIV` in
/// `cuda/tensor_ops.cu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum BinOp {
    /// `lhs + rhs`, rounded once to the dtype (IEEE 754 on every device).
    Add = 0,
    /// `lhs - rhs`, rounded once.
    Sub = 1,
    /// `lhs * rhs`, rounded once: never fused with a neighbouring add into an FMA.
    Mul = 2,
    /// `lhs / rhs`, correctly rounded (the kernels build without fast division).
    Div = 3,
}

/// Checks operands, then runs `op` monomorphised for the float dtype.
fn binary(name: &'static str, op: BinOp, lhs: &Tensor, rhs: &Tensor) -> Result<Tensor> {
    lhs.require_compatible(name, rhs)?;
    on_cuda!(lhs => crate::ops::cuda::binary(name, op, lhs, rhs));
    lhs.require_cpu(name)?;
    with_float_dtype!(lhs.dtype(), name, T => match op {
        BinOp::Add => zip_with::<T>(name, lhs, rhs, |a, b| a + b),
        BinOp::Sub => zip_with::<T>(name, lhs, rhs, |a, b| a - b),
        BinOp::Mul => zip_with::<T>(name, lhs, rhs, |a, b| a * b),
        BinOp::Div => zip_with::<T>(name, lhs, rhs, |a, b| a / b),
    })
}

impl Tensor {
    /// `self + rhs`, broadcasting.
    #[track_caller]
    pub fn add(&self, rhs: &Tensor) -> Result<Tensor> {
        audited!("add", [self, rhs], { binary("add", BinOp::Add, self, rhs) })
    }

    /// `self - rhs`, broadcasting.
    #[track_caller]
    pub fn sub(&self, rhs: &Tensor) -> Result<Tensor> {
        audited!("sub", [self, rhs], { binary("sub", BinOp::Sub, self, rhs) })
    }

    /// `self * rhs` elementwise, broadcasting.
    #[track_caller]
    pub fn mul(&self, rhs: &Tensor) -> Result<Tensor> {
        audited!("mul", [self, rhs], { binary("mul", BinOp::Mul, self, rhs) })
    }

    /// `self / rhs` elementwise, broadcasting (IEEE division: x/0 is ±inf or NaN).
    #[track_caller]
    pub fn div(&self, rhs: &Tensor) -> Result<Tensor> {
        audited!("div", [self, rhs], { binary("div", BinOp::Div, self, rhs) })
    }
}

#[cfg(test)]
mod tests {
    use super::broadcast_dims;
    use crate::{DType, Device, Tensor, TensorError};

    fn f32s(v: Vec<f32>, dims: &[usize]) -> Tensor {
        Tensor::from_vec(v, dims, Device::Cpu).unwrap()
    }

    #[test]
    fn numpy_broadcast_rules() {
        assert_eq!(broadcast_dims("t", &[2, 3], &[3]).unwrap(), vec![2, 3]);
        assert_eq!(broadcast_dims("t", &[4, 1], &[1, 5]).unwrap(), vec![4, 5]);
        assert_eq!(broadcast_dims("t", &[], &[2, 2]).unwrap(), vec![2, 2]);
        assert_eq!(broadcast_dims("t", &[0, 1], &[3]).unwrap(), vec![0, 3]);
        assert!(matches!(
            broadcast_dims("add", &[2, 3], &[2]),
            Err(TensorError::ShapeMismatch { op: "add", .. })
        ));
    }

    #[test]
    fn arithmetic_with_broadcasting() {
        let a = f32s(vec![1., 2., 3., 4., 5., 6.], &[2, 3]);
        let row = f32s(vec![10., 20., 30.], &[3]);
        let col = f32s(vec![1., 2.], &[2, 1]);
        assert_eq!(
            a.add(&row).unwrap().to_vec::<f32>().unwrap(),
            vec![11., 22., 33., 14., 25., 36.]
        );
        assert_eq!(
            a.sub(&col).unwrap().to_vec::<f32>().unwrap(),
            vec![0., 1., 2., 2., 3., 4.]
        );
        assert_eq!(
            a.mul(&a).unwrap().to_vec::<f32>().unwrap(),
            vec![1., 4., 9., 16., 25., 36.]
        );
        let d = col.div(&row).unwrap();
        assert_eq!(d.dims(), &[2, 3]);
        assert_eq!(d.to_vec::<f32>().unwrap()[3], 2. / 10.);
        // A transposed (strided) operand.
        let t = a.t().unwrap().add(&f32s(vec![0., 100.], &[2])).unwrap();
        assert_eq!(
            t.to_vec::<f32>().unwrap(),
            vec![1., 104., 2., 105., 3., 106.]
        );
    }

    #[test]
    fn operand_errors_are_typed() {
        let a = f32s(vec![1., 2.], &[2]);
        let b = Tensor::ones(&[2], DType::F64, Device::Cpu).unwrap();
        assert!(matches!(a.add(&b), Err(TensorError::DTypeMismatch { .. })));
        let c = f32s(vec![1., 2., 3.], &[3]);
        assert!(matches!(a.mul(&c), Err(TensorError::ShapeMismatch { .. })));
        let i = Tensor::ones(&[2], DType::I64, Device::Cpu).unwrap();
        assert!(matches!(
            i.add(&i),
            Err(TensorError::UnsupportedDType { .. })
        ));
    }
}
