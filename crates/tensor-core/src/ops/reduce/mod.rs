//! Reductions: `sum_dim`, `mean_dim`, `sum_all`, `mean_all`, `max_dim`, `argmax`.
//!
//! The evaluation order of every sum is the contract in the [`ops`](crate::ops) docs.

#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub(crate) mod softmax;
pub(crate) mod sum_with;

use rayon::prelude::*;

use std::mem::MaybeUninit;

#[cfg(feature = "cuda")]
use crate::determinism::Chosen;
#[cfg(feature = "cuda")]
use crate::ops::cuda::{sum_dim as cuda_sum, SumKind};
use crate::ops::{build, Float, PAR_MIN_LEN};
use crate::{Element, Result, Tensor, TensorError};

/// Elements per block in every sum (see the [`ops`](crate::ops) docs). Fixed: changing
/// it changes results, and a CUDA implementation must use the same value.
pub const REDUCE_BLOCK: usize = 1024;

/// The contract's sum of `get(0) .. get(n - 1)`, before the final rounding.
pub(crate) fn blocked_sum<T: Float>(n: usize, get: impl Fn(usize) -> T) -> f64 {
    let mut total = 0.0f64;
    for start in (0..n).step_by(REDUCE_BLOCK) {
        let mut block = 0.0f64;
        for i in start..(start + REDUCE_BLOCK).min(n) {
            block += get(i).to_f64();
        }
        total += block;
    }
    total
}

/// [`blocked_sum`] of a slice (the same additions in the same order).
pub(crate) fn blocked_sum_slice<T: Float>(values: &[T]) -> f64 {
    let mut total = 0.0f64;
    for chunk in values.chunks(REDUCE_BLOCK) {
        let mut block = 0.0f64;
        for &x in chunk {
            block += x.to_f64();
        }
        total += block;
    }
    total
}

/// Columns summed together by [`sum_columns`] (its f64 accumulators live on the stack).
const COLUMN_TILE: usize = 128;

/// For every column `j` of the row-major `rows x cols` matrix `m` (`rows > 0`), the
/// contract's sum of column `j`, computed row by row (each column's additions stay in
/// [`blocked_sum`]'s order) and finished by `finish`. Writes `dst[j - first]` for the
/// columns `first .. first + dst.len()`.
fn sum_columns<T: Float>(
    m: &[T],
    rows: usize,
    cols: usize,
    first: usize,
    dst: &mut [MaybeUninit<T>],
    finish: impl Fn(f64) -> T,
) {
    for (tile, dst) in dst.chunks_mut(COLUMN_TILE).enumerate() {
        let c0 = first + tile * COLUMN_TILE;
        let width = dst.len();
        let mut total = [0.0f64; COLUMN_TILE];
        let mut block = [0.0f64; COLUMN_TILE];
        let (total, block) = (&mut total[..width], &mut block[..width]);
        for r0 in (0..rows).step_by(REDUCE_BLOCK) {
            block.fill(0.0);
            for r in r0..(r0 + REDUCE_BLOCK).min(rows) {
                let row = &m[r * cols + c0..][..width];
                for (b, &x) in block.iter_mut().zip(row) {
                    *b += x.to_f64();
                }
            }
            for (t, &b) in total.iter_mut().zip(block.iter()) {
                *t += b;
            }
        }
        for (d, &t) in dst.iter_mut().zip(total.iter()) {
            d.write(finish(t));
        }
    }
}

/// The fast path of the sums along `dim` for a contiguous `t` with a non-empty `dim`:
/// each lane's sum in the contract's order, finished by `finish`. `None` for a strided
/// or empty input, which takes [`reduce_lanes`].
fn sum_lanes_contiguous<T: Float>(
    t: &Tensor,
    dim: usize,
    finish: impl Fn(f64) -> T + Sync,
) -> Result<Option<Vec<T>>> {
    let dims = t.dims();
    let size = dims[dim];
    if !t.is_contiguous() || size == 0 || t.elem_count() == 0 {
        return Ok(None);
    }
    let values = t.as_slice::<T>()?;
    let inner: usize = dims[dim + 1..].iter().product();
    let outer: usize = dims[..dim].iter().product();
    let min_len = (PAR_MIN_LEN / size).max(1);
    let out = if inner == 1 {
        // Each lane is a contiguous run of `size` elements.
        build(outer, 1, min_len, |start, dst| {
            for (d, lane) in dst
                .iter_mut()
                .zip(values[start * size..].chunks_exact(size))
            {
                d.write(finish(blocked_sum_slice(lane)));
            }
        })?
    } else {
        // Each outer index is a `size x inner` matrix whose columns are the lanes. A piece
        // of a few columns would read a few bytes of every row, so each thread would
        // stream the whole matrix (a 4096 x 256 bias-gradient sum ran 1.3-1.4x slower on
        // two threads than on one, benches/fan_out.rs); pieces of an equal share of the
        // columns, whole cache lines wide, read each row once. Only speed depends on it.
        let threads = rayon::current_num_threads();
        let piece = min_len.max(inner.div_ceil(threads).next_multiple_of(16).min(inner));
        build(outer * inner, 1, piece, |start, dst| {
            let mut done = 0;
            while done < dst.len() {
                let (o, j) = ((start + done) / inner, (start + done) % inner);
                let width = (inner - j).min(dst.len() - done);
                let m = &values[o * size * inner..][..size * inner];
                sum_columns(m, size, inner, j, &mut dst[done..done + width], &finish);
                done += width;
            }
        })?
    };
    Ok(Some(out))
}

/// Dims after reducing `dim` (kept as 1 if `keepdim`).
pub fn reduced_dims(dims: &[usize], dim: usize, keepdim: bool) -> Vec<usize> {
    let mut out = dims.to_vec();
    if keepdim {
        out[dim] = 1;
    } else {
        out.remove(dim);
    }
    out
}

/// The per-lane results of `lane` along the last dim of a contiguous `t` (each lane a
/// slice), or `None` when `dim` is not the last dim, `t` is strided or empty.
fn last_dim_lanes<T: Float, U: Element>(
    t: &Tensor,
    dim: usize,
    lane: impl Fn(&[T]) -> U + Sync,
) -> Result<Option<Vec<U>>> {
    if dim + 1 != t.rank() || !t.is_contiguous() || t.dims()[dim] == 0 {
        return Ok(None);
    }
    let size = t.dims()[dim];
    let values = t.as_slice::<T>()?;
    let lanes = t.elem_count() / size;
    let min_len = (PAR_MIN_LEN / size).max(1);
    let out = build(lanes, 1, min_len, |start, dst| {
        for (d, l) in dst
            .iter_mut()
            .zip(values[start * size..].chunks_exact(size))
        {
            d.write(lane(l));
        }
    })?;
    Ok(Some(out))
}

/// Index and value of the maximum of `get(0) .. get(n - 1)` (`n > 0`), with the
/// module's tie and NaN rules.
pub(crate) fn arg_max<T: Float>(n: usize, get: impl Fn(usize) -> T) -> (usize, T) {
    let (mut best, mut best_i) = (get(0), 0);
    for i in 1..n {
        let x = get(i);
        if !best.is_nan() && (x > best || x.is_nan()) {
            best = x;
            best_i = i;
        }
    }
    (best_i, best)
}

/// Applies `lane(size, get)` to every lane of `t` along `dim`, in parallel across lanes.
/// Returns the per-lane results in row-major order of the remaining dims, and those
/// dims (with a 1 kept at `dim` if `keepdim`).
pub(crate) fn reduce_lanes<T: Float, U: Send>(
    t: &Tensor,
    op: &'static str,
    dim: usize,
    keepdim: bool,
    lane: impl Fn(usize, &dyn Fn(usize) -> T) -> U + Sync,
) -> Result<(Vec<U>, Vec<usize>)> {
    t.check_dim(op, dim)?;
    let values = t.values::<T>()?;
    let dims = t.dims();
    let size = dims[dim];
    let inner: usize = dims[dim + 1..].iter().product();
    let outer: usize = dims[..dim].iter().product();
    let mut out = Vec::new();
    (0..outer * inner)
        .into_par_iter()
        .with_min_len((PAR_MIN_LEN / size.max(1)).max(1))
        .map(|lane_index| {
            let base = (lane_index / inner) * size * inner + lane_index % inner;
            lane(size, &|i| values[base + i * inner])
        })
        .collect_into_vec(&mut out);
    Ok((out, reduced_dims(dims, dim, keepdim)))
}

/// Errors when a max / argmax would reduce an empty dimension.
pub fn check_nonempty(t: &Tensor, op: &'static str, dim: usize) -> Result<()> {
    if t.dims().get(dim) == Some(&0) {
        return Err(TensorError::InvalidArgument {
            op,
            message: format!(
                "cannot reduce dimension {dim} of size 0 (dims {:?})",
                t.dims()
            ),
        });
    }
    Ok(())
}

impl Tensor {
    /// Sum along `dim` (kept as size 1 if `keepdim`), in the module's fixed order.
    #[track_caller]
    pub fn sum_dim(&self, dim: usize, keepdim: bool) -> Result<Tensor> {
        audited!("sum_dim", [self], {
            self.check_dim("sum_dim", dim)?;
            on_cuda!(self => cuda_sum("sum_dim", SumKind::Sum, self, Some(dim), keepdim, Chosen::Deterministic));
            self.require_cpu("sum_dim")?;
            with_float_dtype!(self.dtype(), "sum_dim", T => {
                if let Some(v) = sum_lanes_contiguous::<T>(self, dim, T::from_f64)? {
                    let d = reduced_dims(self.dims(), dim, keepdim);
                    return Tensor::from_cpu_storage(T::into_storage(v), &d);
                }
                let (v, d) = reduce_lanes::<T, T>(self, "sum_dim", dim, keepdim, |n, get| {
                    T::from_f64(blocked_sum(n, get))
                })?;
                Tensor::from_cpu_storage(T::into_storage(v), &d)
            })
        })
    }

    /// Mean along `dim`: the f64 sum divided by the size, rounded once (NaN if empty).
    #[track_caller]
    pub fn mean_dim(&self, dim: usize, keepdim: bool) -> Result<Tensor> {
        audited!("mean_dim", [self], {
            self.check_dim("mean_dim", dim)?;
            on_cuda!(self => cuda_sum("mean_dim", SumKind::Mean, self, Some(dim), keepdim, Chosen::Deterministic));
            self.require_cpu("mean_dim")?;
            with_float_dtype!(self.dtype(), "mean_dim", T => {
                let n = self.dims()[dim] as f64;
                if let Some(v) = sum_lanes_contiguous::<T>(self, dim, |s| T::from_f64(s / n))? {
                    let d = reduced_dims(self.dims(), dim, keepdim);
                    return Tensor::from_cpu_storage(T::into_storage(v), &d);
                }
                let (v, d) = reduce_lanes::<T, T>(self, "mean_dim", dim, keepdim, |n, get| {
                    T::from_f64(blocked_sum(n, get) / n as f64)
                })?;
                Tensor::from_cpu_storage(T::into_storage(v), &d)
            })
        })
    }

    /// Sum of every element (row-major order) as a rank-0 tensor.
    #[track_caller]
    pub fn sum_all(&self) -> Result<Tensor> {
        audited!("sum_all", [self], {
            on_cuda!(self => cuda_sum("sum_all", SumKind::Sum, self, None, false, Chosen::Deterministic));
            self.require_cpu("sum_all")?;
            with_float_dtype!(self.dtype(), "sum_all", T => {
                let s = T::from_f64(blocked_sum_slice(&self.values::<T>()?));
                Tensor::from_cpu_storage(T::into_storage(vec![s]), &[])
            })
        })
    }

    /// Mean of every element as a rank-0 tensor (NaN if empty).
    #[track_caller]
    pub fn mean_all(&self) -> Result<Tensor> {
        audited!("mean_all", [self], {
            on_cuda!(self => cuda_sum("mean_all", SumKind::Mean, self, None, false, Chosen::Deterministic));
            self.require_cpu("mean_all")?;
            with_float_dtype!(self.dtype(), "mean_all", T => {
                let v = self.values::<T>()?;
                let m = T::from_f64(blocked_sum_slice(&v) / v.len() as f64);
                Tensor::from_cpu_storage(T::into_storage(vec![m]), &[])
            })
        })
    }

    /// Maximum along `dim` (values only; see [`Tensor::argmax`] for indices). Errors on
    /// an empty dimension.
    #[track_caller]
    pub fn max_dim(&self, dim: usize, keepdim: bool) -> Result<Tensor> {
        audited!("max_dim", [self], {
            check_nonempty(self, "max_dim", dim)?;
            on_cuda!(self => Ok(crate::ops::cuda::max_dim("max_dim", self, dim, keepdim)?.0));
            self.require_cpu("max_dim")?;
            with_float_dtype!(self.dtype(), "max_dim", T => {
                if let Some(v) = last_dim_lanes::<T, T>(self, dim, |l| arg_max(l.len(), |i| l[i]).1)? {
                    let d = reduced_dims(self.dims(), dim, keepdim);
                    return Tensor::from_cpu_storage(T::into_storage(v), &d);
                }
                let (v, d) =
                    reduce_lanes::<T, T>(self, "max_dim", dim, keepdim, |n, get| arg_max(n, get).1)?;
                Tensor::from_cpu_storage(T::into_storage(v), &d)
            })
        })
    }

    /// Index of the maximum along `dim` as an I64 tensor without that dim (first
    /// maximum on ties, first NaN if any). Errors on an empty dimension.
    #[track_caller]
    pub fn argmax(&self, dim: usize) -> Result<Tensor> {
        audited!("argmax", [self], {
            check_nonempty(self, "argmax", dim)?;
            on_cuda!(self => Ok(crate::ops::cuda::max_dim("argmax", self, dim, false)?.1));
            self.require_cpu("argmax")?;
            with_float_dtype!(self.dtype(), "argmax", T => {
                let last = last_dim_lanes::<T, i64>(self, dim, |l| arg_max(l.len(), |i| l[i]).0 as i64)?;
                if let Some(v) = last {
                    let d = reduced_dims(self.dims(), dim, false);
                    return Tensor::from_cpu_storage(i64::into_storage(v), &d);
                }
                let (v, d) = reduce_lanes::<T, i64>(self, "argmax", dim, false, |n, get| {
                    arg_max(n, get).0 as i64
                })?;
                Tensor::from_cpu_storage(i64::into_storage(v), &d)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::REDUCE_BLOCK;
    use crate::{DType, Device, Tensor, TensorError};

    fn m23() -> Tensor {
        Tensor::from_vec(vec![1f32, 5., 3., 4., 2., 6.], &[2, 3], Device::Cpu).unwrap()
    }

    #[test]
    fn sums_and_means_along_dims() {
        let s0 = m23().sum_dim(0, false).unwrap();
        assert_eq!(s0.dims(), &[3]);
        assert_eq!(s0.to_vec::<f32>().unwrap(), vec![5., 7., 9.]);
        let s1 = m23().sum_dim(1, true).unwrap();
        assert_eq!(s1.dims(), &[2, 1]);
        assert_eq!(s1.to_vec::<f32>().unwrap(), vec![9., 12.]);
        let m = m23().t().unwrap().mean_dim(0, false).unwrap();
        assert_eq!(m.to_vec::<f32>().unwrap(), vec![3., 4.]);
        assert_eq!(m23().sum_all().unwrap().to_scalar::<f32>().unwrap(), 21.);
        assert_eq!(m23().mean_all().unwrap().to_scalar::<f32>().unwrap(), 3.5);
        assert!(matches!(
            m23().sum_dim(2, false),
            Err(TensorError::DimOutOfRange { .. })
        ));
        let empty = Tensor::zeros(&[0, 2], DType::F32, Device::Cpu).unwrap();
        assert_eq!(
            empty.sum_dim(0, false).unwrap().to_vec::<f32>().unwrap(),
            vec![0., 0.]
        );
    }

    #[test]
    fn sum_follows_the_documented_order() {
        let n = 3 * REDUCE_BLOCK + 17;
        let v: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.1 + 1e-3).collect();
        let mut total = 0f64;
        for block in v.chunks(REDUCE_BLOCK) {
            let mut part = 0f64;
            for &x in block {
                part += f64::from(x);
            }
            total += part;
        }
        let want = total as f32;
        // The contract is observable: a plain f32 running sum gives another answer.
        assert_ne!(want, v.iter().fold(0f32, |acc, &x| acc + x));
        let t = Tensor::from_vec(v.clone(), &[n], Device::Cpu).unwrap();
        assert_eq!(t.sum_all().unwrap().to_scalar::<f32>().unwrap(), want);
        let col = t.reshape(&[n, 1]).unwrap().sum_dim(0, false).unwrap();
        assert_eq!(col.to_vec::<f32>().unwrap(), vec![want]);
        let mean = t.mean_all().unwrap().to_scalar::<f32>().unwrap();
        assert_eq!(mean, (total / n as f64) as f32);
        // f64 inputs make the blocking itself observable.
        let w: Vec<f64> = (0..n)
            .map(|i| 1.0 / (i as f64 + 1.0) * [1e3, -7.0, 0.3][i % 3])
            .collect();
        let blocked: f64 = w
            .chunks(REDUCE_BLOCK)
            .map(|b| b.iter().fold(0.0, |a, &x| a + x))
            .fold(0.0, |a, b| a + b);
        assert_ne!(blocked, w.iter().fold(0.0, |a, &x| a + x));
        let t = Tensor::from_vec(w, &[n], Device::Cpu).unwrap();
        assert_eq!(t.sum_all().unwrap().to_scalar::<f64>().unwrap(), blocked);
        // 2^24 + 1 in f32 loses the 1; summing in f64 keeps it until the final rounding.
        let big = Tensor::from_vec(vec![16_777_216f32, 1.0, 1.0], &[3], Device::Cpu).unwrap();
        assert_eq!(
            big.sum_all().unwrap().to_scalar::<f32>().unwrap(),
            16_777_218.0
        );
    }

    #[test]
    fn max_and_argmax() {
        let mx = m23().max_dim(1, false).unwrap();
        assert_eq!(mx.to_vec::<f32>().unwrap(), vec![5., 6.]);
        let am = m23().argmax(0).unwrap();
        assert_eq!(am.dtype(), DType::I64);
        assert_eq!(am.to_vec::<i64>().unwrap(), vec![1, 0, 1]);
        let ties = Tensor::from_vec(vec![2f64, 7., 7., f64::NAN, 1.], &[5], Device::Cpu).unwrap();
        assert_eq!(
            ties.narrow(0, 0, 3)
                .unwrap()
                .argmax(0)
                .unwrap()
                .to_vec::<i64>()
                .unwrap(),
            vec![1]
        );
        assert_eq!(ties.argmax(0).unwrap().to_vec::<i64>().unwrap(), vec![3]);
        assert!(ties.max_dim(0, true).unwrap().to_vec::<f64>().unwrap()[0].is_nan());
        let empty = Tensor::zeros(&[2, 0], DType::F32, Device::Cpu).unwrap();
        assert!(matches!(
            empty.argmax(1),
            Err(TensorError::InvalidArgument { .. })
        ));
    }
}
