//! The math that training needs, one folder per family: `elementwise` (arithmetic, maps,
//! GELU, in-place updates), `reduce` (sums, maxima, `log_softmax`), `matmul` (2-D and
//! batched; gemm, ditto's portable kernels, cuBLAS), `normalization` (layer norm),
//! `attention` (the causal softmax), `optimizers` (SGD with momentum, AdamW),
//! `accumulate` (`index_add`, `scatter_add`) and `class_index` (`gather`, `one_hot`).
//! Each folder holds the family's CPU code and its CUDA launchers (`cuda.rs`, as dfdx
//! keeps an op's kernels side by side), so one folder answers "how does this op run";
//! `cuda/` keeps what every launcher shares (kernel lookup, grids, strided views).
//!
//! The pieces a kernel's arguments are built from are public (the layouts in
//! [`kernel_layout`], the op codes, the checked arguments of `index_add` / `scatter_add`,
//! the SGD step's rounded scalars, the argument checks on [`Tensor`]): a downstream
//! crate writing its own CUDA op builds them the same way, and so do the host-parity
//! tests (`tests/host-parity`), which run the kernels' bodies on the host.
//!
//! # Determinism
//! No result depends on the number of threads. Elementwise ops may run on rayon (each
//! output element is computed independently, so splitting cannot change it).
//! Reductions follow the fixed order below. `matmul` runs `gemm` on blocks of the output
//! whose shapes depend only on the matrix sizes, one single-threaded call per block (see
//! [`Tensor::matmul`]), or under portable arithmetic ditto's own kernels, whose order is
//! defined for any thread count ([`crate::portable`]).
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
//! Every op checks dtypes (f32 or f64; operands must agree), devices (operands must be
//! on one device) and shapes, and returns a typed error otherwise. Tensors on a GPU run
//! the same ops as CUDA kernels (the `cuda` submodule), under the same order of sums.
//! Scalar arguments are `f64` and are converted to the tensor's dtype (rounded to
//! nearest) before use, so `x * s` in f32 means `x * (s as f32)`.

pub mod accumulate;
pub(crate) mod attention;
pub(crate) mod class_index;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub mod elementwise;
mod float;
pub mod kernel_layout;
pub(crate) mod matmul;
pub(crate) mod normalization;
pub mod optimizers;
pub mod reduce;
mod slice_scatter;

#[cfg(test)]
mod fast_path_tests;

pub use float::Float;

pub use accumulate::grouped::INDEX_ADD_GROUP;
pub use accumulate::index_add::scatter_add_atomic_cpu;
pub use optimizers::adamw::AdamWStep;
pub use optimizers::adamw::{AdamWSlot, ADAMW_MANY};
pub use optimizers::adamw_many::adamw_step_many_;
pub use optimizers::fused_sgd::SgdMomentumStep;
pub use reduce::sum_with::SUM_FAST_MIN_LANE;
pub use reduce::REDUCE_BLOCK;

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::creation::try_with_capacity;
use crate::{Device, Element, Result, Tensor, TensorError};

/// Below this many elements elementwise ops stay on the calling thread (thread hand-off
/// costs more than the work). Only speed depends on it, never values.
pub(crate) const PAR_MIN_LEN: usize = 1 << 15;

/// `f` applied to every element, in order; parallel for long inputs, and vectorised
/// for the widest SIMD level allowed ([`widest_simd`]).
pub(crate) fn par_map<T: Float, U: Float>(src: &[T], f: impl Fn(T) -> U + Sync) -> Result<Vec<U>> {
    build(src.len(), 1, PAR_MIN_LEN, |start, dst| {
        widest_simd(|| {
            for (d, &x) in dst.iter_mut().zip(&src[start..]) {
                d.write(f(x));
            }
        });
    })
}

/// Runs `body` compiled for the widest SIMD level the CPU has and `DITTO_SIMD` allows
/// ([`SimdLevel::chosen`](crate::portable::matmul::SimdLevel::chosen)): an elementwise
/// loop inlined here is vectorised 16 f32 wide on AVX-512 instead of the baseline's 4.
/// No value depends on the level: such loops are IEEE adds, muls and divs, which Rust
/// never contracts into fused multiply-adds, so each lane rounds as the scalar code.
#[inline(always)]
pub(crate) fn widest_simd<R>(body: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::portable::matmul::SimdLevel;
        #[target_feature(enable = "avx512f")]
        fn avx512<R>(body: impl FnOnce() -> R) -> R {
            body()
        }
        #[target_feature(enable = "avx2")]
        fn avx2<R>(body: impl FnOnce() -> R) -> R {
            body()
        }
        match SimdLevel::chosen() {
            // SAFETY: `chosen` names a level only when the CPU has it.
            SimdLevel::Avx512 => return unsafe { avx512(body) },
            SimdLevel::Avx2Fma => return unsafe { avx2(body) },
            SimdLevel::Scalar => {}
        }
    }
    body()
}

/// A new vector of `count` elements written by `fill(start, dst)`, which must write every
/// element of `dst`, the output elements `start .. start + dst.len()`. The pieces are
/// whole multiples of `unit` elements (`count` must be one too) of at least `min_len`
/// elements; they run on rayon when there are several. Each output element must be a
/// function of its index alone, so the split never changes a value.
pub(crate) fn build<U: Element>(
    count: usize,
    unit: usize,
    min_len: usize,
    fill: impl Fn(usize, &mut [MaybeUninit<U>]) + Sync,
) -> Result<Vec<U>> {
    debug_assert_eq!(count.checked_rem(unit), Some(0));
    let mut out = try_with_capacity::<U>(count, U::DTYPE)?;
    let dst = &mut out.spare_capacity_mut()[..count];
    // Whole units of at least `min_len` elements per piece.
    let piece = min_len.div_ceil(unit).max(1) * unit;
    // One piece, or a one-thread pool, which would only hand the pieces to its worker
    // and wait (the split never changes a value, so this only changes speed).
    if count <= piece || rayon::current_num_threads() == 1 {
        fill(0, dst);
    } else {
        dst.par_chunks_mut(piece)
            .enumerate()
            .for_each(|(i, chunk)| fill(i * piece, chunk));
    }
    // SAFETY: the `count` elements were allocated above and `fill` wrote every one of
    // them (its contract; all callers write each element of `dst` exactly once).
    unsafe { out.set_len(count) };
    Ok(out)
}

impl Tensor {
    /// Errors with `NotImplementedOnDevice` unless the tensor is on the CPU.
    pub(crate) fn require_cpu(&self, op: &'static str) -> Result<()> {
        match self.device() {
            Device::Cpu => Ok(()),
            device => Err(TensorError::NotImplementedOnDevice { op, device }),
        }
    }

    /// Errors unless `other` is on this tensor's device and has its dtype.
    pub fn require_compatible(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.device() != other.device() {
            return Err(TensorError::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: other.device(),
            });
        }
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
    pub fn require_same_dims(&self, op: &'static str, other: &Tensor) -> Result<()> {
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
    pub(crate) fn values<T: Element>(&self) -> Result<std::borrow::Cow<'_, [T]>> {
        if self.is_contiguous() {
            return Ok(std::borrow::Cow::Borrowed(self.as_slice::<T>()?));
        }
        Ok(std::borrow::Cow::Owned(self.to_vec::<T>()?))
    }
}
