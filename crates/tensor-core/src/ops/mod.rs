//! The CPU math that training needs, one family per file.
//!
//! # Determinism
//! No result depends on the number of threads. Elementwise ops may run on rayon (each
//! output element is computed independently, so splitting cannot change it).
//! Reductions follow the fixed order below. `matmul` runs `gemm` single-threaded (see
//! [`Tensor::matmul`]).
//!
//! # Evaluation order of sums (part of ditto's reproducibility contract)
//! A sum of `n` values `x_0 .. x_{n-1}` (along the reduced dimension, or over the whole
//! tensor in row-major order for `sum_all`) is computed as:
//! 1. split the indices into consecutive blocks of [`REDUCE_BLOCK`] (the last shorter);
//! 2. sum each block left to right in f64, starting from +0.0 (every f32 and f64 input
//!    converts to f64 exactly);
//! 3. sum the block sums left to right in f64, starting from +0.0;
//! 4. round the total once to the tensor's dtype (round to nearest even).
//!
//! A mean is step 3's total divided by `n` in f64, then rounded once. The order depends
//! only on `n`, never on threads: parallelism is across independent outputs only.
//! `max_dim` / `argmax` scan left to right; the first maximum wins ties; NaN counts as
//! larger than everything (the first NaN wins), as in PyTorch. `log_softmax` is
//! documented on [`Tensor::log_softmax`].
//!
//! Every op checks dtypes (f32 or f64; operands must agree), devices (CUDA tensors get
//! `NotImplementedOnDevice` for now) and shapes, and returns a typed error otherwise.
//! Scalar arguments are `f64` and are converted to the tensor's dtype (rounded to
//! nearest) before use, so `x * s` in f32 means `x * (s as f32)`.

mod binary;
mod float;
mod inplace;
mod matmul;
mod reduce;
mod softmax;
mod unary;

pub(crate) use float::Float;
pub use reduce::REDUCE_BLOCK;

use rayon::prelude::*;

use crate::{Device, Result, Tensor, TensorError};

/// Below this many elements elementwise ops stay on the calling thread (thread hand-off
/// costs more than the work). Only speed depends on it, never values.
pub(crate) const PAR_MIN_LEN: usize = 1 << 15;

/// `f` applied to every element, in order; parallel for long inputs.
pub(crate) fn par_map<T: Float, U: Float>(src: &[T], f: impl Fn(T) -> U + Sync) -> Vec<U> {
    let mut out = Vec::new();
    src.par_iter()
        .with_min_len(PAR_MIN_LEN)
        .map(|&x| f(x))
        .collect_into_vec(&mut out);
    out
}

impl Tensor {
    /// Errors with `NotImplementedOnDevice` unless the tensor is on the CPU.
    pub(crate) fn require_cpu(&self, op: &'static str) -> Result<()> {
        match self.device() {
            Device::Cpu => Ok(()),
            device => Err(TensorError::NotImplementedOnDevice { op, device }),
        }
    }

    /// Errors unless `other` has this tensor's dtype and device (and both are on CPU).
    pub(crate) fn require_same(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.device() != other.device() {
            return Err(TensorError::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: other.device(),
            });
        }
        self.require_cpu(op)?;
        if self.dtype() != other.dtype() {
            return Err(TensorError::DTypeMismatch {
                op,
                expected: self.dtype(),
                got: other.dtype(),
            });
        }
        Ok(())
    }

    /// Errors unless `other` has exactly this tensor's dims.
    pub(crate) fn require_same_dims(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.dims() != other.dims() {
            return Err(TensorError::ShapeMismatch {
                op,
                lhs: self.dims().to_vec(),
                rhs: other.dims().to_vec(),
            });
        }
        Ok(())
    }

    /// The elements in row-major order: borrowed when contiguous, copied otherwise.
    pub(crate) fn values<T: Float>(&self) -> Result<std::borrow::Cow<'_, [T]>> {
        if self.is_contiguous() {
            return Ok(std::borrow::Cow::Borrowed(self.as_slice::<T>()?));
        }
        Ok(std::borrow::Cow::Owned(self.to_vec::<T>()?))
    }
}
