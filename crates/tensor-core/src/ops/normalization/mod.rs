//! Layer normalisation over the last dimension, forward and backward (PyTorch's
//! `native_layer_norm` / `native_layer_norm_backward` with `normalized_shape` the last
//! dimension).
//!
//! # Evaluation order (part of ditto's reproducibility contract)
//! A tensor `[..., c]` is `rows` rows of `c` values. For row `x_0 .. x_{c-1}`, with
//! every sum in the blocked f64 order of the [`ops`](crate::ops) docs:
//!
//! 1. `mean = sum_i x_i / c` in f64; `var = sum_i (x_i - mean)^2 / c` in f64 (biased,
//!    as PyTorch); `rstd = 1 / sqrt(var + eps)` in f64. Both are rounded once to the
//!    dtype, and those rounded values are what the op returns and backward takes;
//! 2. `xhat_i = (x_i - mean) * rstd`, then `y_i = xhat_i * w_i + b_i`, each operation in
//!    the dtype, never fused.
//!
//! Backward, for a row with output gradient `dy`: `xhat_i` as in step 2, `g_i = dy_i *
//! w_i` in the dtype; `a = sum_i g_i / c` and `b = sum_i g_i xhat_i / c` in f64 (each
//! product of the two values in f64); `dx_i = rstd (g_i - a - xhat_i b)` in f64, rounded
//! once. The weight gradient of column `j` is the blocked f64 sum over rows of `dy_rj
//! xhat_rj` (products in f64), the bias gradient that of `dy_rj`, each rounded once.
//!
//! Only correctly rounded operations (no `exp`, no `log`, and `sqrt` is correctly
//! rounded everywhere), in an order that depends on the shape alone: the same bits for
//! any thread count and on every device, portable arithmetic or not.

#[cfg(feature = "cuda")]
pub(crate) mod cuda;

use std::mem::MaybeUninit;

use crate::ops::reduce::{blocked_sum, REDUCE_BLOCK};
use crate::ops::{build, Float, PAR_MIN_LEN};
use crate::{Element, Result, Tensor, TensorError};

/// `(rows, c)` of a `[..., c]` input with a non-empty last dimension.
fn rows_and_width(op: &'static str, x: &Tensor) -> Result<(usize, usize)> {
    match x.dims().last() {
        Some(&c) if c > 0 => Ok((x.elem_count() / c, c)),
        _ => Err(TensorError::InvalidArgument {
            op,
            message: format!(
                "expected a tensor [..., c] with c > 0 to normalise over its last dimension, got {:?}",
                x.dims()
            ),
        }),
    }
}

/// Errors unless `t` (weight, bias) is a `[c]` tensor of `x`'s dtype and device.
fn check_affine(op: &'static str, x: &Tensor, t: Option<&Tensor>, c: usize) -> Result<()> {
    let Some(t) = t else { return Ok(()) };
    x.require_compatible(op, t)?;
    if t.dims() != [c] {
        return Err(TensorError::ShapeMismatch {
            op,
            lhs: x.dims().to_vec(),
            rhs: t.dims().to_vec(),
        });
    }
    Ok(())
}

/// Errors unless `t` (mean, rstd) has `x`'s dims with the last one 1.
fn check_stats(op: &'static str, x: &Tensor, t: &Tensor) -> Result<()> {
    x.require_compatible(op, t)?;
    let mut want = x.dims().to_vec();
    if let Some(last) = want.last_mut() {
        *last = 1;
    }
    if t.dims() != want.as_slice() {
        return Err(TensorError::ShapeMismatch {
            op,
            lhs: want,
            rhs: t.dims().to_vec(),
        });
    }
    Ok(())
}

/// The dims of `mean` / `rstd` for input dims `dims`: the last one 1.
fn stats_dims(dims: &[usize]) -> Vec<usize> {
    let mut out = dims.to_vec();
    if let Some(last) = out.last_mut() {
        *last = 1;
    }
    out
}

/// Step 1 of the module docs for one row: `(mean, rstd)` rounded to the dtype.
fn row_stats<T: Float>(x: &[T], eps: f64) -> (T, T) {
    let c = x.len() as f64;
    let mean = blocked_sum(x.len(), |i| x[i]) / c;
    let var = blocked_sum(x.len(), |i| {
        let d = x[i].to_f64() - mean;
        d * d
    }) / c;
    (T::from_f64(mean), T::from_f64(1.0 / (var + eps).sqrt()))
}

/// The weight (or bias) value of column `j`; 1 (or 0) when there is none.
fn affine<T: Float>(values: Option<&[T]>, j: usize, default: f64) -> T {
    values.map_or_else(|| T::from_f64(default), |v| v[j])
}

/// Step 2's `xhat`.
fn normalised<T: Float>(x: T, mean: T, rstd: T) -> T {
    (x - mean) * rstd
}

/// The backward's input gradient for one row (module docs), written into `dst`.
fn row_input_grad<T: Float>(
    dy: &[T],
    x: &[T],
    mean: T,
    rstd: T,
    w: Option<&[T]>,
    dst: &mut [MaybeUninit<T>],
) {
    let c = x.len();
    let g = |i: usize| dy[i] * affine(w, i, 1.0);
    let xhat = |i: usize| normalised(x[i], mean, rstd);
    let a = blocked_sum(c, g) / c as f64;
    let b = blocked_sum(c, |i| g(i).to_f64() * xhat(i).to_f64()) / c as f64;
    let r = rstd.to_f64();
    for (i, d) in dst.iter_mut().enumerate() {
        d.write(T::from_f64(
            r * ((g(i).to_f64() - a) - xhat(i).to_f64() * b),
        ));
    }
}

/// The weight and bias gradients of the columns `first .. first + dw.len()`: blocked
/// f64 sums over rows, accumulated row by row (each column's additions in the
/// contract's order) so that the rows are read in storage order.
#[allow(clippy::too_many_arguments)]
fn column_grads<T: Float>(
    dy: &[T],
    x: &[T],
    mean: &[T],
    rstd: &[T],
    c: usize,
    first: usize,
    dw: &mut [MaybeUninit<T>],
    db: &mut [MaybeUninit<T>],
) {
    let width = dw.len();
    let rows = mean.len();
    let (mut total_w, mut total_b) = (vec![0.0f64; width], vec![0.0f64; width]);
    let (mut block_w, mut block_b) = (vec![0.0f64; width], vec![0.0f64; width]);
    for r0 in (0..rows).step_by(REDUCE_BLOCK) {
        block_w.fill(0.0);
        block_b.fill(0.0);
        for r in r0..(r0 + REDUCE_BLOCK).min(rows) {
            let (dy, x) = (&dy[r * c + first..][..width], &x[r * c + first..][..width]);
            let columns = block_w
                .iter_mut()
                .zip(block_b.iter_mut())
                .zip(dy.iter().zip(x));
            for ((w, b), (&dy, &x)) in columns {
                let xhat = normalised(x, mean[r], rstd[r]);
                *w += dy.to_f64() * xhat.to_f64();
                *b += dy.to_f64();
            }
        }
        for (total, block) in [(&mut total_w, &block_w), (&mut total_b, &block_b)] {
            for (t, b) in total.iter_mut().zip(block.iter()) {
                *t += b;
            }
        }
    }
    for (d, &t) in dw.iter_mut().zip(&total_w) {
        d.write(T::from_f64(t));
    }
    for (d, &t) in db.iter_mut().zip(&total_b) {
        d.write(T::from_f64(t));
    }
}

impl Tensor {
    /// Layer normalisation of `self` (`[..., c]`) over its last dimension, with an
    /// optional elementwise `weight` and `bias` (`[c]`, PyTorch's `elementwise_affine`;
    /// none means 1 and 0). Returns `(output, mean, rstd)`, `mean` and `rstd` shaped
    /// like `self` with the last dimension 1, as PyTorch's `native_layer_norm`: what
    /// [`Tensor::layer_norm_backward`] takes. The arithmetic is in the module docs.
    #[track_caller]
    pub fn layer_norm(
        &self,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        const OP: &str = "layer_norm";
        let inputs: Vec<&Tensor> = [Some(self), weight, bias].into_iter().flatten().collect();
        let recorder = crate::audit::OpRecorder::begin(OP, &inputs);
        let result = (|| {
            let (rows, c) = rows_and_width(OP, self)?;
            check_affine(OP, self, weight, c)?;
            check_affine(OP, self, bias, c)?;
            if !(eps.is_finite() && eps >= 0.0) {
                return Err(TensorError::InvalidArgument {
                    op: OP,
                    message: format!("eps must be finite and >= 0, got {eps}"),
                });
            }
            on_cuda!(self => crate::ops::cuda::layer_norm(self, weight, bias, eps));
            self.require_cpu(OP)?;
            let stats = stats_dims(self.dims());
            with_float_dtype!(self.dtype(), OP, T => {
                let x = self.values::<T>()?;
                let w = weight.map(|w| w.values::<T>()).transpose()?;
                let b = bias.map(|b| b.values::<T>()).transpose()?;
                let (w, b) = (w.as_deref(), b.as_deref());
                let moments: Vec<(T, T)> = {
                    use rayon::prelude::*;
                    x.par_chunks(c)
                        .with_min_len((PAR_MIN_LEN / c).max(1))
                        .map(|row| row_stats(row, eps))
                        .collect()
                };
                let out = build(rows * c, c, PAR_MIN_LEN.max(c), |start, dst| {
                    for (k, (d, x)) in dst.chunks_exact_mut(c).zip(x[start..].chunks_exact(c)).enumerate() {
                        let (mean, rstd) = moments[start / c + k];
                        for (j, (d, &x)) in d.iter_mut().zip(x).enumerate() {
                            let xhat = normalised(x, mean, rstd);
                            d.write(xhat * affine(w, j, 1.0) + affine(b, j, 0.0));
                        }
                    }
                })?;
                let (mean, rstd): (Vec<T>, Vec<T>) = moments.into_iter().unzip();
                Ok((
                    Tensor::from_cpu_storage(T::into_storage(out), self.dims())?,
                    Tensor::from_cpu_storage(T::into_storage(mean), &stats)?,
                    Tensor::from_cpu_storage(T::into_storage(rstd), &stats)?,
                ))
            })
        })();
        if let Ok((out, _, _)) = &result {
            recorder.finish(out);
        }
        result
    }

    /// The gradients of [`Tensor::layer_norm`] given the output gradient `grad`, the
    /// forward's `input`, the `mean` and `rstd` it returned, and its `weight` (none
    /// means 1): `(input gradient, weight gradient, bias gradient)`, the last two `[c]`
    /// (PyTorch's `native_layer_norm_backward`). The arithmetic is in the module docs.
    #[track_caller]
    pub fn layer_norm_backward(
        grad: &Tensor,
        input: &Tensor,
        mean: &Tensor,
        rstd: &Tensor,
        weight: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        const OP: &str = "layer_norm_backward";
        let inputs: Vec<&Tensor> = [Some(grad), Some(input), Some(mean), Some(rstd), weight]
            .into_iter()
            .flatten()
            .collect();
        let recorder = crate::audit::OpRecorder::begin(OP, &inputs);
        let result = (|| {
            let (rows, c) = rows_and_width(OP, input)?;
            input.require_compatible(OP, grad)?;
            input.require_same_dims(OP, grad)?;
            check_stats(OP, input, mean)?;
            check_stats(OP, input, rstd)?;
            check_affine(OP, input, weight, c)?;
            on_cuda!(input => crate::ops::cuda::layer_norm_backward(grad, input, mean, rstd, weight));
            input.require_cpu(OP)?;
            with_float_dtype!(input.dtype(), OP, T => {
                let (dy, x) = (grad.values::<T>()?, input.values::<T>()?);
                let (m, r) = (mean.values::<T>()?, rstd.values::<T>()?);
                let w = weight.map(|w| w.values::<T>()).transpose()?;
                let w = w.as_deref();
                let dx = build(rows * c, c, PAR_MIN_LEN.max(c), |start, dst| {
                    for (k, d) in dst.chunks_exact_mut(c).enumerate() {
                        let row = start / c + k;
                        let span = row * c..(row + 1) * c;
                        row_input_grad(&dy[span.clone()], &x[span], m[row], r[row], w, d);
                    }
                })?;
                let mut dw = crate::creation::try_with_capacity::<T>(c, T::DTYPE)?;
                let mut db = crate::creation::try_with_capacity::<T>(c, T::DTYPE)?;
                let tile = (PAR_MIN_LEN / rows.max(1)).clamp(1, c);
                {
                    use rayon::prelude::*;
                    let dw_dst = &mut dw.spare_capacity_mut()[..c];
                    let db_dst = &mut db.spare_capacity_mut()[..c];
                    dw_dst
                        .par_chunks_mut(tile)
                        .zip(db_dst.par_chunks_mut(tile))
                        .enumerate()
                        .for_each(|(t, (dw, db))| {
                            column_grads(&dy, &x, &m, &r, c, t * tile, dw, db);
                        });
                }
                // SAFETY: `column_grads` wrote every one of the `c` columns of both.
                unsafe {
                    dw.set_len(c);
                    db.set_len(c);
                }
                Ok((
                    Tensor::from_cpu_storage(T::into_storage(dx), input.dims())?,
                    Tensor::from_cpu_storage(T::into_storage(dw), &[c])?,
                    Tensor::from_cpu_storage(T::into_storage(db), &[c])?,
                ))
            })
        })();
        if let Ok((dx, _, _)) = &result {
            recorder.finish(dx);
        }
        result
    }
}
