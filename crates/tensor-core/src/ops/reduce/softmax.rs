//! `log_softmax`, numerically stable (the evaluation order is on the method).

use std::mem::MaybeUninit;

use crate::ops::reduce::{arg_max, blocked_sum, reduce_lanes, REDUCE_BLOCK};
use crate::ops::{build, Float, PAR_MIN_LEN};
use crate::{Element, Result, Tensor};

/// The log-softmax of one lane, following the module's steps.
fn lane<T: Float>(n: usize, get: &dyn Fn(usize) -> T, portable: bool) -> Vec<T> {
    if n == 0 {
        return Vec::new();
    }
    let m = arg_max(n, get).1;
    let shifted: Vec<T> = (0..n).map(|i| get(i) - m).collect();
    let z = blocked_sum(n, |i| exp_of(shifted[i], portable));
    let l = T::ln_of_sum(z, portable);
    shifted.into_iter().map(|s| s - l).collect()
}

/// [`lane`] for a contiguous lane, written straight into its output row (the same
/// operations in the same order).
fn lane_into<T: Float>(x: &[T], dst: &mut [MaybeUninit<T>], portable: bool) {
    let m = arg_max(x.len(), |i| x[i]).1;
    let mut total = 0.0f64;
    for chunk in x.chunks(REDUCE_BLOCK) {
        let mut block = 0.0f64;
        for &x in chunk {
            block += exp_of(x - m, portable).to_f64();
        }
        total += block;
    }
    let l = T::ln_of_sum(total, portable);
    for (d, &x) in dst.iter_mut().zip(x) {
        d.write((x - m) - l);
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

impl Tensor {
    /// `log(softmax(x))` along `dim`, same dims as the input. Along each lane
    /// `x_0 .. x_{n-1}`, in the tensor's dtype unless noted:
    /// 1. `m = max_i x_i` (NaN if any element is NaN);
    /// 2. `s_i = x_i - m`;
    /// 3. `z = sum_i exp(s_i)`, `exp` in the dtype (libm), the sum in the blocked f64
    ///    order of the [`ops`](crate::ops) docs;
    /// 4. `l = ln(z)` in f64, rounded once to the dtype;
    ///
    /// Under portable arithmetic (docs/contract.md §14) an f32 lane uses ditto's own
    /// `exp` in step 3 and `l = log_of_sum(z)` ([`crate::portable::math::log_of_sum`])
    /// in step 4, the same bits on every device.
    /// 5. `out_i = s_i - l`.
    ///
    /// Subtracting the maximum keeps `exp` from overflowing; a lane of all `-inf` gives
    /// NaN (as in PyTorch).
    #[track_caller]
    pub fn log_softmax(&self, dim: usize) -> Result<Tensor> {
        audited!("log_softmax", [self], {
            const OP: &str = "log_softmax";
            self.check_dim(OP, dim)?;
            on_cuda!(self => crate::ops::cuda::log_softmax(self, dim));
            self.require_cpu(OP)?;
            let portable = crate::are_portable_arithmetic_enabled();
            with_float_dtype!(self.dtype(), OP, T => {
                let dims = self.dims();
                if dim + 1 == dims.len() && dims[dim] > 0 && self.is_contiguous() {
                    // Lanes are contiguous rows: write each output row in place.
                    let (x, n) = (self.as_slice::<T>()?, dims[dim]);
                    let min_len = PAR_MIN_LEN.max(n);
                    let out = build(x.len(), n, min_len, |start, dst| {
                        let rows = x[start..].chunks_exact(n);
                        for (d, x) in dst.chunks_exact_mut(n).zip(rows) {
                            lane_into(x, d, portable);
                        }
                    })?;
                    return Tensor::from_cpu_storage(T::into_storage(out), dims);
                }
                let (lanes, _) = reduce_lanes::<T, Vec<T>>(self, OP, dim, true, |n, get| {
                    lane::<T>(n, get, portable)
                })?;
                let dims = self.dims();
                let (size, inner) = (dims[dim], dims[dim + 1..].iter().product::<usize>());
                let mut out = vec![T::ZERO; self.elem_count()];
                for (lane_index, values) in lanes.into_iter().enumerate() {
                    let base = (lane_index / inner) * size * inner + lane_index % inner;
                    for (i, v) in values.into_iter().enumerate() {
                        out[base + i * inner] = v;
                    }
                }
                Tensor::from_cpu_storage(T::into_storage(out), dims)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{Device, Tensor, TensorError};

    #[test]
    fn matches_the_definition_and_is_stable() {
        let x = Tensor::from_vec(
            vec![1f64, 2., 3., 1000., 1001., 1002.],
            &[2, 3],
            Device::Cpu,
        )
        .unwrap();
        let y = x.log_softmax(1).unwrap().to_vec::<f64>().unwrap();
        let z: f64 = [1f64, 2., 3.].iter().map(|v| (v - 3.0).exp()).sum();
        let want: Vec<f64> = [1f64, 2., 3.].iter().map(|v| v - 3.0 - z.ln()).collect();
        assert_eq!(&y[..3], &want[..]);
        assert_eq!(&y[3..], &want[..]);
        let cols = x.log_softmax(0).unwrap().to_vec::<f64>().unwrap();
        assert!(cols.iter().all(|v| v.is_finite() && *v <= 0.0));
        assert!((cols[3] - 0.0).abs() < 1e-12);
    }

    #[test]
    fn f32_rows_sum_to_one() {
        let x = Tensor::from_vec(vec![0.5f32, -1.0, 3.0, 0.0], &[1, 4], Device::Cpu).unwrap();
        let p: f32 = x
            .log_softmax(1)
            .unwrap()
            .exp()
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .sum();
        assert!((p - 1.0).abs() < 1e-6);
        let neg_inf = Tensor::from_vec(vec![f32::NEG_INFINITY; 2], &[2], Device::Cpu).unwrap();
        let y = neg_inf.log_softmax(0).unwrap().to_vec::<f32>().unwrap();
        assert!(y.iter().all(|v| v.is_nan()));
        assert!(matches!(
            x.log_softmax(2),
            Err(TensorError::DimOutOfRange { .. })
        ));
    }
}
