//! `randperm`: a uniformly random permutation by Fisher-Yates.

use tensor_core::{Device, Tensor};

use super::pipeline::{run, Stream, Target};
use super::sampler::{Layout, Sampler};
use crate::stream::convert::below;
use crate::{Generator, RngError};

/// A random permutation of `0..n` as an I64 tensor of shape `[n]` (`torch.randperm`).
///
/// Fisher-Yates as in docs/contract.md §5.9: start from `0, 1, ..., n-1`; for `i` from
/// `n-1` down to 1, swap positions `i` and `j`, where `j = below(w_2k, w_2k+1, i + 1)` is
/// draw `k = n-1-i`. The `n - 1` draws of two words each are a random op of their own
/// (`Draws`), run through the pipeline like every other; the swaps that follow are a
/// chain of dependent steps, so they run in order on the host (faster there than as a
/// one-thread kernel) and a CUDA permutation is copied to the device at the end.
#[track_caller]
pub fn randperm(
    n: usize,
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    let mut perm = tensor_core::try_zeroed_vec::<i64>(n)?;
    let target = Target::HostFor {
        dims: &[n.saturating_sub(1)],
        device,
    };
    let draws = run(Draws { n: n as u64 }, target, Stream::Reserve(generator))?
        .tensor
        .expect("a host target gives a tensor");
    for (i, value) in perm.iter_mut().enumerate() {
        *value = i as i64;
    }
    for (k, &j) in draws.as_slice::<i64>()?.iter().enumerate() {
        perm.swap(n - 1 - k, j as usize);
    }
    Ok(Tensor::from_vec(perm, &[n], device)?)
}

/// Draw `k` of a Fisher-Yates shuffle of `n`: uniform in `[0, n - k)`, for position
/// `i = n-1-k`.
pub(crate) struct Draws {
    n: u64,
}

impl Sampler for Draws {
    type Elem = i64;
    fn name(&self) -> &'static str {
        "randperm"
    }
    fn layout(&self) -> Layout {
        Layout::per_element(2)
    }
    fn fill_group(&self, k: u64, w: &[u32], out: &mut [i64]) {
        out[0] = below(w[0], w[1], self.n - k) as i64;
    }
}

#[cfg(test)]
pub(crate) mod samplers {
    //! The sampler, for the SIMD-versus-scalar tests.
    pub(crate) fn draws(n: u64) -> super::Draws {
        super::Draws { n }
    }
}
