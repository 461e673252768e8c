//! Gumbel noise as a random op of its own, written only with ditto's public items: the
//! example of `docs/custom-random-op.md`. `examples/custom_random_op.rs` uses it, and the
//! out-of-workspace crate `examples/downstream/` compiles this very file to show that a
//! crate outside ditto can write it.
//!
//! An op is a [`Sampler`]: its layout on the stream (here one word per element), a
//! scalar body (the definition), optionally a batch body (speed) and a CUDA body (a
//! kernel that includes ditto's headers). `sample` / `sample_` run it through ditto's
//! pipeline: validation, one reservation of `ceil(n / 4)` blocks, a parallel CPU fill
//! that gives the same bits for any thread count, or the kernel launch.

use ditto::rng_gen::stream::f32math::ln;
use ditto::rng_gen::{self, Generator, Key, Layout, RngError, Sampler, BATCH_WORDS};
use ditto::tensor_core::{Device, Tensor};

/// `u` in (0, 1), never 0 or 1: the top 24 bits of `word`, centred in their interval
/// (exact in f32). Twin of `gumbel_open_uniform` in `gumbel.cuh`.
#[inline(always)]
fn open_uniform(word: u32) -> f32 {
    (word >> 8) as f32 * (1.0 / 16_777_216.0) + 1.0 / 33_554_432.0
}

/// Gumbel(`loc`, `scale`) samples in f32: element `i` is `loc - scale * ln(-ln(u))` with
/// `u` from word `i`. ditto's own `ln` (correctly rounded operations only, no math
/// library) keeps CPU and GPU bit-identical.
#[derive(Clone, Copy, Debug)]
pub struct Gumbel {
    /// Location.
    pub loc: f32,
    /// Scale (> 0).
    pub scale: f32,
}

impl Gumbel {
    /// The element of `word`: the op's definition, stated once.
    #[inline(always)]
    fn element(&self, word: u32) -> f32 {
        let inner = -ln(open_uniform(word));
        let scaled = self.scale * ln(inner);
        self.loc - scaled
    }
}

impl Sampler for Gumbel {
    type Elem = f32;

    fn name(&self) -> &'static str {
        "gumbel"
    }

    fn layout(&self) -> Layout {
        Layout::per_element(1)
    }

    fn fill_group(&self, _group: u64, words: &[u32], out: &mut [f32]) {
        out[0] = self.element(words[0]);
    }

    #[inline(always)]
    fn fill_batch(&self, _first: u64, words: &[u32; BATCH_WORDS], out: &mut [f32]) {
        for (o, &w) in out.iter_mut().zip(words) {
            *o = self.element(w);
        }
    }

    #[cfg(feature = "cuda")]
    fn cuda_kernel(&mut self) -> ditto::kernels::Result<Option<ditto::rng_gen::KernelCall<'_>>> {
        use ditto::rng_gen::KernelArg;
        Ok(Some(ditto::rng_gen::KernelCall {
            source: &cuda::SOURCE,
            kernel: "example_gumbel_f32_kernel".into(),
            args: vec![KernelArg::F32(self.loc), KernelArg::F32(self.scale)],
            elements_per_item: 4,
        }))
    }
}

/// The kernel's source for NVRTC: `gumbel.cu` with `gumbel.cuh` and ditto's headers
/// inlined, compiled once per device and cached under its file name.
#[cfg(feature = "cuda")]
pub mod cuda {
    use ditto::tensor_core::cuda::CudaSource;

    /// The kernel's translation unit, as ditto's module cache knows it.
    pub static SOURCE: CudaSource = CudaSource {
        file_name: "example_gumbel.cu",
        text: translation_unit,
    };

    /// `gumbel.cu` with its headers inlined.
    pub fn translation_unit() -> String {
        ditto::kernels::source::translation_unit_with(
            include_str!("gumbel.cu"),
            &[("gumbel.cuh", include_str!("gumbel.cuh"))],
        )
    }
}

/// Errors unless `loc` is finite and `scale` finite and positive (checked before any
/// generator is touched, like ditto's own ops).
fn check(loc: f32, scale: f32) -> Result<(), RngError> {
    if !loc.is_finite() {
        return Err(RngError::InvalidMean {
            op: "gumbel",
            mean: f64::from(loc),
        });
    }
    if !(scale.is_finite() && scale > 0.0) {
        return Err(RngError::InvalidStd {
            op: "gumbel",
            std: f64::from(scale),
        });
    }
    Ok(())
}

/// Gumbel noise of shape `dims` on `device`, from `generator` (or the device's default).
pub fn gumbel(
    dims: &[usize],
    loc: f32,
    scale: f32,
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    check(loc, scale)?;
    rng_gen::sample(Gumbel { loc, scale }, dims, device, generator)
}

/// Gumbel noise written into the existing f32 tensor `out`; returns the key it drew
/// from.
pub fn gumbel_(
    out: &mut Tensor,
    loc: f32,
    scale: f32,
    generator: Option<&Generator>,
) -> Result<Key, RngError> {
    check(loc, scale)?;
    rng_gen::sample_(Gumbel { loc, scale }, out, generator)
}
