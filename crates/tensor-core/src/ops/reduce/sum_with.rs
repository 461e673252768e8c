//! `sum_with` / `mean_with`: sums and means with an explicit [`Algorithm`], for the one
//! place a reduction has a faster nondeterministic path: CUDA's one-pass atomic sum.
//!
//! On the CPU every sum follows the fixed order of the [`ops`](crate::ops) docs and
//! there is no fast path, so the algorithm changes nothing. On CUDA the deterministic
//! path is the two-phase kernel in that same order (bit-identical to the CPU); the fast
//! path has each GPU thread sum about 4096 elements in f64 and add that into its lane's
//! f64 total with `atomicAdd`, in arrival order. `Algorithm::Auto` takes it in `Off`
//! mode for contiguous lanes (reducing the last dimension, or everything) of at least
//! [`SUM_FAST_MIN_LANE`] elements: on an H100 (`benches/gpu_determinism_bench.rs`,
//! `benches/RESULTS.md`) the atomic path won only for a 2^26-element total (2.68 ms
//! against 3.60) and lost by 4x to 14x for lanes of 2^16 to 2^20, so Auto takes it
//! only from there.

#[cfg(feature = "cuda")]
use crate::determinism::paths::SUM_CUDA;
use crate::determinism::Algorithm;
use crate::{Result, Tensor};

/// The lane length from which `Algorithm::Auto` takes CUDA's atomic sum in `Off` mode
/// (the determinism table says "2^26+"), the smallest lane the H100 measured it faster on.
pub const SUM_FAST_MIN_LANE: usize = 1 << 26;

impl Tensor {
    /// Sum along `dim` (`None`: of every element, as a rank-0 tensor; `keepdim` keeps a
    /// size-1 `dim`), on the path `algorithm` and the deterministic-algorithms switch
    /// choose. [`Tensor::sum_dim`] and [`Tensor::sum_all`] are this with
    /// `Algorithm::Deterministic`.
    #[track_caller]
    pub fn sum_with(
        &self,
        dim: Option<usize>,
        keepdim: bool,
        algorithm: Algorithm,
    ) -> Result<Tensor> {
        audited!("sum_with", [self], {
            self.reduce_with("sum", dim, keepdim, algorithm, false)
        })
    }

    /// Mean along `dim` (`None`: of every element), like [`Tensor::sum_with`].
    #[track_caller]
    pub fn mean_with(
        &self,
        dim: Option<usize>,
        keepdim: bool,
        algorithm: Algorithm,
    ) -> Result<Tensor> {
        audited!("mean_with", [self], {
            self.reduce_with("mean", dim, keepdim, algorithm, true)
        })
    }

    fn reduce_with(
        &self,
        name: &'static str,
        dim: Option<usize>,
        keepdim: bool,
        algorithm: Algorithm,
        mean: bool,
    ) -> Result<Tensor> {
        if let Some(d) = dim {
            self.check_dim(name, d)?;
        }
        #[cfg(feature = "cuda")]
        if self.device().is_cuda() {
            use crate::ops::cuda::{sum_dim, SumKind};
            let kind = if mean { SumKind::Mean } else { SumKind::Sum };
            let lane = dim.map_or(self.elem_count(), |d| self.dims()[d]);
            let contiguous_lanes = dim.is_none_or(|d| d + 1 == self.rank());
            let pays = contiguous_lanes && lane >= SUM_FAST_MIN_LANE;
            let order = SUM_CUDA.choose(algorithm, self.device(), pays)?;
            return sum_dim(name, kind, self, dim, keepdim, order);
        }
        let _ = algorithm; // the CPU has only the fixed-order sum
        match (dim, mean) {
            (Some(d), false) => self.sum_dim(d, keepdim),
            (Some(d), true) => self.mean_dim(d, keepdim),
            (None, false) => self.sum_all(),
            (None, true) => self.mean_all(),
        }
    }
}
