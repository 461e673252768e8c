//! Random tensors: `rand`, `randn`, `uniform`, `normal`, `bernoulli`, `randint`,
//! `randperm`, `bits` and `dropout`.
//!
//! Every op follows the same steps, in this order:
//! 1. validate every argument (shape, dtype, parameters, device, generator): a rejected
//!    call touches no generator, and CPU and CUDA give the same error;
//! 2. reserve `kernels::increment_for(op, dtype, n)` blocks on the generator (always,
//!    even for `n == 0`, which reserves 0);
//! 3. compute: on CPU with the samplers here, which fill chunks of whole Philox blocks in
//!    parallel (bit-identical for any thread count); on `Device::Cuda(i)` through
//!    `cuda_dispatch`, whose kernels follow the same per-element rules.
//!
//! The per-element rules (which words an element uses, how they become a value) are
//! those of DESIGN.md §1 and [`crate::stream::convert`].

mod args;
mod bernoulli;
mod bits;
pub(crate) mod cuda_dispatch;
mod dropout;
mod dropout_rows;
mod fill;
mod mask;
mod normal;
mod randint;
mod randperm;
mod uniform;

pub use bernoulli::bernoulli;
pub use bits::bits;
pub use dropout::{dropout, dropout_backward, dropout_with_mask, DropoutState};
pub use dropout_rows::dropout_rows;
pub use normal::{normal, randn};
pub use randint::randint;
pub use randperm::randperm;
pub use uniform::{rand, uniform};

use half::{bf16, f16};
use kernels::RandomOp;
use tensor_core::{DType, Element, Tensor};

use crate::stream::key::Key;
use crate::{Generator, RngError};

/// The CPU path shared by the element-wise samplers: allocate (before reserving, so an
/// impossible allocation consumes nothing), reserve, fill (`fill(out, key)`, one of the
/// loops of `fill.rs`), wrap.
fn cpu_sample<T, F>(
    dims: &[usize],
    n: usize,
    generator: &Generator,
    op: RandomOp,
    dtype: DType,
    fill: F,
) -> Result<Tensor, RngError>
where
    T: Element,
    F: FnOnce(&mut [T], Key),
{
    debug_assert_eq!(T::DTYPE, dtype);
    let mut out = args::alloc(n, T::from_f64(0.0))?;
    let key = generator.reserve(op, dtype, n as u64);
    fill(&mut out, key);
    args::cpu_tensor(out, dims)
}

/// The output types of the samplers that compute in f32: f32 itself, and f16 / bf16,
/// which DESIGN.md §1 defines as "compute f32, round to nearest even" so that one
/// generic sampler serves all three and the rounding happens in exactly one place.
trait RoundFromF32: Element {
    /// `x` rounded to nearest even (exact for f32).
    fn round_from_f32(x: f32) -> Self;
}

impl RoundFromF32 for f32 {
    fn round_from_f32(x: f32) -> Self {
        x
    }
}

impl RoundFromF32 for f16 {
    fn round_from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
}

impl RoundFromF32 for bf16 {
    fn round_from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
}
