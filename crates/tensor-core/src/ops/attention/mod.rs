//! The softmax of causal self-attention, fused with its scale and mask: for attention
//! scores `x` `[..., t, t]` (query `i`, key `j`), `softmax_j(scale * x_ij)` over the keys
//! `j <= i`, and exactly 0 for the keys after the query (what `masked_fill(-inf)` then
//! `softmax` gives in nanoGPT), and its backward.
//!
//! # Evaluation order (part of ditto's reproducibility contract)
//! For query row `i`, in the tensor's dtype unless noted, with sums in the blocked f64
//! order of the [`ops`](crate::ops) docs over `j = 0 ..= i`:
//! 1. `z_j = x_ij * scale` (the scale rounded to the dtype first, as every scalar);
//! 2. `m = max_j z_j` (NaN if any is NaN, as `max_dim`);
//! 3. `e_j = exp(z_j - m)`: libm's `exp`, or ditto's own for f32 under portable
//!    arithmetic (docs/contract.md §14);
//! 4. `p_ij = e_j / s` for `s = sum_j e_j`, the division in f64, rounded once;
//!    `p_ij = 0` for `j > i`.
//!
//! Backward, given the gradient `dp` of the probabilities: `d = sum_j dp_ij p_ij` in f64
//! (each product of the two values exact in f64 for f32), then `dx_ij = (p_ij (dp_ij -
//! d)) scale` in f64, rounded once, for `j <= i`, and 0 after. The scale is applied
//! here, so `dx` is the gradient with respect to the unscaled scores.
//!
//! Under portable arithmetic every step is the same bits on every device; without it
//! only `exp` is the platform's.

#[cfg(feature = "cuda")]
pub(crate) mod cuda;

use std::mem::MaybeUninit;

use crate::ops::reduce::{arg_max, blocked_sum};
use crate::ops::{build, Float, PAR_MIN_LEN};
use crate::{Element, Result, Tensor, TensorError};

/// `t`, the size of the two last (equal) dimensions of `x`.
fn square_size(op: &'static str, x: &Tensor) -> Result<usize> {
    let dims = x.dims();
    match dims {
        [.., a, b] if a == b => Ok(*a),
        _ => Err(TensorError::InvalidArgument {
            op,
            message: format!(
                "expected attention scores [..., t, t] (queries by keys), got {dims:?}"
            ),
        }),
    }
}

/// `e^x`: libm's, or ditto's own under portable arithmetic.
fn exp_of<T: Float>(x: T, portable: bool) -> T {
    if portable {
        x.portable_exp()
    } else {
        x.exp()
    }
}

/// Steps 1 to 4 for query row `i` (`x` is the row, `t` long), written into `dst`.
fn forward_row<T: Float>(x: &[T], i: usize, scale: T, portable: bool, dst: &mut [MaybeUninit<T>]) {
    let keys = i + 1;
    let z = |j: usize| x[j] * scale;
    let m = arg_max(keys, z).1;
    let total = blocked_sum(keys, |j| exp_of(z(j) - m, portable));
    for (j, d) in dst.iter_mut().enumerate() {
        d.write(if j < keys {
            T::from_f64(exp_of(z(j) - m, portable).to_f64() / total)
        } else {
            T::ZERO
        });
    }
}

/// The backward of query row `i` (module docs), written into `dst`.
fn backward_row<T: Float>(dp: &[T], p: &[T], i: usize, scale: f64, dst: &mut [MaybeUninit<T>]) {
    let keys = i + 1;
    let dot = blocked_sum(keys, |j| dp[j].to_f64() * p[j].to_f64());
    for (j, d) in dst.iter_mut().enumerate() {
        d.write(if j < keys {
            T::from_f64(p[j].to_f64() * (dp[j].to_f64() - dot) * scale)
        } else {
            T::ZERO
        });
    }
}

/// Rows of `t` elements per parallel piece: at least [`PAR_MIN_LEN`] elements.
fn min_piece(t: usize) -> usize {
    PAR_MIN_LEN.max(t)
}

impl Tensor {
    /// Causal attention probabilities from scores `self` `[..., t, t]`: along each query
    /// row `i`, the softmax of `scale * self` over keys `0 ..= i`, and 0 over the keys
    /// after `i`. The order of operations is in the module docs; with `t = 0` the
    /// result is empty.
    #[track_caller]
    pub fn causal_softmax(&self, scale: f64) -> Result<Tensor> {
        audited!("causal_softmax", [self], {
            const OP: &str = "causal_softmax";
            let t = square_size(OP, self)?;
            let portable = crate::are_portable_arithmetic_enabled();
            on_cuda!(self => crate::ops::cuda::causal_softmax(self, scale, portable));
            self.require_cpu(OP)?;
            with_float_dtype!(self.dtype(), OP, T => {
                if self.elem_count() == 0 {
                    return Tensor::from_cpu_storage(T::into_storage(Vec::new()), self.dims());
                }
                let x = self.values::<T>()?;
                let scale = T::from_f64(scale);
                let out = build(x.len(), t, min_piece(t), |start, dst| {
                    let rows = x[start..].chunks_exact(t).zip(dst.chunks_exact_mut(t));
                    for (k, (x, d)) in rows.enumerate() {
                        forward_row(x, (start / t + k) % t, scale, portable, d);
                    }
                })?;
                Tensor::from_cpu_storage(T::into_storage(out), self.dims())
            })
        })
    }

    /// The gradient of [`Tensor::causal_softmax`] with respect to its scores, given
    /// the gradient `grad` of its output `probs` and the same `scale` (module docs).
    /// `grad` and `probs` must have the same dims `[..., t, t]`, dtype and device.
    #[track_caller]
    pub fn causal_softmax_backward(grad: &Tensor, probs: &Tensor, scale: f64) -> Result<Tensor> {
        audited!("causal_softmax_backward", [grad, probs], {
            const OP: &str = "causal_softmax_backward";
            grad.require_compatible(OP, probs)?;
            grad.require_same_dims(OP, probs)?;
            let t = square_size(OP, probs)?;
            on_cuda!(probs => crate::ops::cuda::causal_softmax_backward(grad, probs, scale));
            probs.require_cpu(OP)?;
            with_float_dtype!(probs.dtype(), OP, T => {
                if probs.elem_count() == 0 {
                    return Tensor::from_cpu_storage(T::into_storage(Vec::new()), probs.dims());
                }
                let (dp, p) = (grad.values::<T>()?, probs.values::<T>()?);
                let scale = T::from_f64(scale).to_f64();
                let out = build(p.len(), t, min_piece(t), |start, dst| {
                    for (k, d) in dst.chunks_exact_mut(t).enumerate() {
                        let row = start / t + k;
                        let span = row * t..(row + 1) * t;
                        backward_row(&dp[span.clone()], &p[span], row % t, scale, d);
                    }
                })?;
                Tensor::from_cpu_storage(T::into_storage(out), probs.dims())
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor, TensorError};

    #[test]
    fn rows_are_masked_softmaxes() {
        let scores: Vec<f64> = (0..18).map(|i| f64::from(i) * 0.37 - 2.0).collect();
        let x = Tensor::from_vec(scores.clone(), &[2, 3, 3], Device::Cpu).unwrap();
        let p = x.causal_softmax(0.5).unwrap().to_vec::<f64>().unwrap();
        for row in 0..6 {
            let i = row % 3;
            let z: Vec<f64> = (0..=i).map(|j| 0.5 * scores[row * 3 + j]).collect();
            let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = z.iter().map(|v| (v - m).exp()).sum();
            for j in 0..3 {
                let want = if j <= i { (z[j] - m).exp() / s } else { 0.0 };
                assert!((p[row * 3 + j] - want).abs() < 1e-15, "row {row} key {j}");
            }
        }
    }

    #[test]
    fn backward_matches_finite_differences() {
        let scores: Vec<f64> = (0..16).map(|i| (f64::from(i) * 1.3).sin()).collect();
        let up: Vec<f64> = (0..16).map(|i| (f64::from(i) * 0.7).cos()).collect();
        let x = Tensor::from_vec(scores.clone(), &[1, 4, 4], Device::Cpu).unwrap();
        let dp = Tensor::from_vec(up.clone(), &[1, 4, 4], Device::Cpu).unwrap();
        let p = x.causal_softmax(0.8).unwrap();
        let dx = Tensor::causal_softmax_backward(&dp, &p, 0.8)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        let loss = |s: &[f64]| -> f64 {
            let t = Tensor::from_vec(s.to_vec(), &[1, 4, 4], Device::Cpu).unwrap();
            let p = t.causal_softmax(0.8).unwrap().to_vec::<f64>().unwrap();
            p.iter().zip(&up).map(|(a, b)| a * b).sum()
        };
        for k in 0..16 {
            let h = 1e-6;
            let (mut plus, mut minus) = (scores.clone(), scores.clone());
            plus[k] += h;
            minus[k] -= h;
            let numeric = (loss(&plus) - loss(&minus)) / (2.0 * h);
            assert!(
                (dx[k] - numeric).abs() < 1e-8,
                "element {k}: {} vs {numeric}",
                dx[k]
            );
        }
    }

    #[test]
    fn shapes_are_checked() {
        let x = Tensor::zeros(&[2, 3, 4], DType::F32, Device::Cpu).unwrap();
        assert!(matches!(
            x.causal_softmax(1.0),
            Err(TensorError::InvalidArgument { .. })
        ));
        let empty = Tensor::zeros(&[2, 0, 0], DType::F32, Device::Cpu).unwrap();
        assert_eq!(empty.causal_softmax(1.0).unwrap().dims(), &[2, 0, 0]);
    }
}
