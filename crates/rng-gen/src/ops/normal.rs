//! `randn`, `normal` and `normal_`: Gaussian samples by Box-Muller on pairs of words.
//!
//! f32 / f16 / bf16 (docs/contract.md §5.3): pair `m` uses words `2m`, `2m+1`;
//! `u1 = v(w_2m)`, `u2 = v(w_2m+1)` with `v(w) = f32(w) * 2^-32 + 2^-33` in (0, 1];
//! `r = sqrt(-2 ln u1)`, `(s, c) = sincospi(2 u2)` (ditto's own `ln` / `sincospi`);
//! elements `2m = r c`, `2m+1 = r s`; then `mean + std * z`, rounded to f16 / bf16 once.
//! The batch body computes the same expressions a batch of pairs at a time, in loops
//! LLVM turns into vector instructions (vectorised `ln`, `sqrt`, `sincospi`).

use tensor_core::{DType, Device, Tensor};

use super::args::MeanStd;
use super::float_sampler::{float_tensor, float_tensor_, FloatSampler};
use super::sampler::{Layout, Sampler, BATCH_WORDS};
use super::NarrowFloat;
use crate::stream::convert::{box_muller, open_uniform_f32, scale_normal_f32, uniform_f64};
use crate::stream::f32math::{ln_positive_normal, sincospi_finite};
use crate::{Generator, RngError};

/// Standard normal samples (`torch.randn`): [`normal`] with mean 0 and std 1.
#[track_caller]
pub fn randn(
    shape: &[usize],
    dtype: DType,
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    float_tensor::<MeanStd>("randn", shape, (0.0, 1.0), dtype, device, generator)
}

/// Normal samples `mean + std * z` (`torch.normal` with scalar mean and std).
///
/// f32: pair `m` uses words `2m`, `2m+1` and ditto's own `ln` / `sincospi`
/// ([`box_muller`]), so results are bit-identical on CPU and GPU; an odd count still
/// consumes its last pair. f16 / bf16: the f32 result rounded to nearest even.
///
/// f64 is CPU-only and outside the bit-identical CPU/GPU contract: pair `m` uses words
/// `4m..4m+3`, `u1 = 1 - uniform_f64(w0, w1)` (in (0, 1]), `u2 = uniform_f64(w2, w3)`,
/// `r = sqrt(-2 ln u1)`, `z = (r cos 2πu2, r sin 2πu2)` with the platform's f64
/// `ln` / `sin` / `cos`, so the last bit may differ between math libraries. On a CUDA
/// device f64 is refused with `UnsupportedDType`.
///
/// Errors unless `mean` is finite and `std` is finite and `>= 0` (in f32 for the f32,
/// f16 and bf16 dtypes).
#[track_caller]
pub fn normal(
    shape: &[usize],
    mean: f64,
    std: f64,
    dtype: DType,
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    float_tensor::<MeanStd>("normal", shape, (mean, std), dtype, device, generator)
}

/// [`normal`] into the existing float tensor `t` (`torch.Tensor.normal_(mean, std)`): the
/// same values and consumption as `normal(t.dims(), mean, std, t.dtype(), t.device(),
/// generator)`. `t` must be contiguous.
#[track_caller]
pub fn normal_(
    t: &mut Tensor,
    mean: f64,
    std: f64,
    generator: Option<&Generator>,
) -> Result<(), RngError> {
    float_tensor_::<MeanStd>("normal_", t, (mean, std), generator)
}

/// The normal sampler writing `T`: f32 / f16 / bf16 by Box-Muller and `mean + std * z`
/// in f32, then one rounding to `T`; f64 (CPU only) by Box-Muller in f64 on four words
/// per pair.
pub(crate) type Normal<T> = FloatSampler<MeanStd, T>;

impl<T: NarrowFloat> Normal<T> {
    #[inline(always)]
    fn element(&self, z: f32) -> T {
        let (mean, std) = self.params.mean_std();
        T::round_from_f32(scale_normal_f32(z, mean as f32, std as f32))
    }
}

/// Pairs in a batch.
const PAIRS: usize = BATCH_WORDS / 2;

impl<T: NarrowFloat> Sampler for Normal<T> {
    type Elem = T;
    fn name(&self) -> &'static str {
        self.op
    }
    fn layout(&self) -> Layout {
        Layout::groups(2, 2)
    }
    /// One pair: [`box_muller`] on its two words (the last pair of an odd count writes
    /// only its first element).
    fn fill_group(&self, _group: u64, w: &[u32], out: &mut [T]) {
        let (z0, z1) = box_muller(w[0], w[1]);
        out[0] = self.element(z0);
        if let Some(second) = out.get_mut(1) {
            *second = self.element(z1);
        }
    }
    /// `box_muller` a batch at a time, step by step over arrays: the same operations in
    /// the same order, on positive normal `u1` (so `ln` needs no special cases) and
    /// finite `2 u2` (so `sincospi` needs none).
    #[inline(always)]
    fn fill_batch(&self, _first: u64, words: &[u32; BATCH_WORDS], out: &mut [T]) {
        let mut radius = [0f32; PAIRS];
        let mut angle = [0f32; PAIRS];
        for (m, w) in words.chunks_exact(2).enumerate() {
            radius[m] = open_uniform_f32(w[0]);
            angle[m] = open_uniform_f32(w[1]);
        }
        for r in &mut radius {
            *r = (-2.0 * ln_positive_normal(*r)).sqrt();
        }
        let mut z = [0f32; BATCH_WORDS];
        for (m, (&r, &u2)) in radius.iter().zip(&angle).enumerate() {
            let (sin, cos) = sincospi_finite(2.0 * u2);
            z[2 * m] = r * cos;
            z[2 * m + 1] = r * sin;
        }
        for (o, &z) in out.iter_mut().zip(&z) {
            *o = self.element(z);
        }
    }
    #[cfg(feature = "cuda")]
    fn cuda_kernel(&mut self) -> kernels::Result<Option<kernels::KernelCall<'_>>> {
        let (mean, std) = self.params.mean_std();
        kernels::launch::normal_call(T::DTYPE, mean as f32, std as f32).map(Some)
    }
}

impl Sampler for Normal<f64> {
    type Elem = f64;
    fn name(&self) -> &'static str {
        self.op
    }
    fn layout(&self) -> Layout {
        Layout::groups(2, 4)
    }
    fn fill_group(&self, _group: u64, w: &[u32], out: &mut [f64]) {
        let (mean, std) = self.params.mean_std();
        let u1 = 1.0 - uniform_f64(w[0], w[1]);
        let u2 = uniform_f64(w[2], w[3]);
        let radius = (-2.0 * u1.ln()).sqrt();
        let theta = std::f64::consts::TAU * u2;
        out[0] = mean + std * (radius * theta.cos());
        if let Some(second) = out.get_mut(1) {
            *second = mean + std * (radius * theta.sin());
        }
    }
}

#[cfg(test)]
pub(crate) mod samplers {
    //! The samplers, for the SIMD-versus-scalar tests.
    pub(crate) use super::Normal;
}
