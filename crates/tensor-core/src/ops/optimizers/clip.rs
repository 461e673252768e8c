//! `clip_coefficients`: gradient-norm clipping's arithmetic (PyTorch's
//! `torch.nn.utils.clip_grad_norm_` with the 2-norm) on the device that holds the sums.
//!
//! Why an op of its own: a training step on a GPU must not wait for the device, and
//! clipping needs one number computed from every gradient. Here it stays on the device:
//! the parameters' sums of squares go in, `[norm, factor]` comes out, and each gradient
//! is multiplied by `factor` there (`nn_mini::clip_grad_norm_`). Nobody reads anything
//! until the caller wants the norm (a training loop reads it with the step's loss).
//!
//! # Order of operations (the same bits on every device)
//! `total = sum of f64(sums[i])`, in index order, from +0.0; `norm = sqrt(total)`;
//! `coef = max_norm / (norm + 1e-6)`, all in f64; `factor = coef` when `norm` is finite
//! and `coef < 1`, else 1 (nothing is scaled: a non-finite norm is the caller's to
//! report). Both are rounded once to the sums' dtype. Multiplying by a factor of exactly 1
//! leaves every finite value as it was.
//!
//! The CUDA body is `ditto_clip_coefficients` in `cuda/transformer_ops.cuh`, one thread.

use crate::ops::Float;
use crate::{DType, Result, Tensor, TensorError};

/// `[norm, factor]` from the sums of squares `sums` (module docs).
fn coefficients<T: Float>(sums: &[T], max_norm: f64) -> [T; 2] {
    let total = sums.iter().fold(0.0f64, |total, s| total + s.to_f64());
    let norm = total.sqrt();
    let coef = max_norm / (norm + 1e-6);
    let factor = if norm.is_finite() && coef < 1.0 {
        coef
    } else {
        1.0
    };
    [T::from_f64(norm), T::from_f64(factor)]
}

impl Tensor {
    /// For `self` the parameters' sums of squared gradients (`[n]`, f32 or f64), the
    /// tensor `[norm, factor]` of the same dtype on the same device: the gradients'
    /// global 2-norm and the factor that clips them to `max_norm` (module docs).
    #[track_caller]
    pub fn clip_coefficients(&self, max_norm: f64) -> Result<Tensor> {
        audited!("clip_coefficients", [self], {
            const OP: &str = "clip_coefficients";
            if self.rank() != 1 {
                return Err(TensorError::InvalidArgument {
                    op: OP,
                    message: format!(
                        "expected the sums of squares as a vector [n], got dims {:?}",
                        self.dims()
                    ),
                });
            }
            if !(max_norm.is_finite() && max_norm > 0.0) {
                return Err(TensorError::InvalidArgument {
                    op: OP,
                    message: format!("max_norm must be finite and > 0, got {max_norm}"),
                });
            }
            on_cuda!(self => crate::ops::optimizers::cuda::clip_coefficients(self, max_norm));
            self.require_cpu(OP)?;
            match self.dtype() {
                DType::F32 => {
                    let out = coefficients(&self.contiguous()?.to_vec::<f32>()?, max_norm);
                    Tensor::from_vec(out.to_vec(), &[2], crate::Device::Cpu)
                }
                DType::F64 => {
                    let out = coefficients(&self.contiguous()?.to_vec::<f64>()?, max_norm);
                    Tensor::from_vec(out.to_vec(), &[2], crate::Device::Cpu)
                }
                dtype => Err(TensorError::UnsupportedDType {
                    op: OP,
                    dtype,
                    supported: "f32, f64",
                }),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{Device, Tensor};

    #[test]
    fn norm_and_factor() {
        let sums = Tensor::from_vec(vec![9.0f64, 16.0], &[2], Device::Cpu).unwrap();
        let out = sums
            .clip_coefficients(1.0)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        assert_eq!(out[0], 5.0);
        assert_eq!(out[1], 1.0 / (5.0 + 1e-6));
        // Below the limit, or not finite: nothing is scaled.
        let out = sums
            .clip_coefficients(10.0)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        assert_eq!(out, [5.0, 1.0]);
        let inf = Tensor::from_vec(vec![f32::INFINITY, 1.0], &[2], Device::Cpu).unwrap();
        let out = inf.clip_coefficients(1.0).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(out, [f32::INFINITY, 1.0]);
        assert!(sums.clip_coefficients(0.0).is_err());
        assert!(sums
            .reshape(&[1, 2])
            .unwrap()
            .clip_coefficients(1.0)
            .is_err());
    }
}
