//! `randperm`: a uniformly random permutation by Fisher-Yates.

use kernels::RandomOp;
use tensor_core::{DType, Device, Tensor};

use super::args::{alloc, cpu_tensor, generator_for};
use super::cuda_dispatch;
use super::fill::{fill, Layout};
use crate::stream::convert::below;
use crate::{Generator, RngError};

/// A random permutation of `0..n` as an I64 tensor of shape `[n]` (`torch.randperm`).
///
/// Fisher-Yates as in DESIGN.md §1: start from `0, 1, ..., n-1`; for `i` from `n-1`
/// down to 1, swap positions `i` and `j`, where `j = below(w_2k, w_2k+1, i + 1)` is draw
/// `k = n-1-i`. So `n - 1` draws of two words each. The draws are computed in parallel
/// (each from its own words), then the swaps run in order.
pub fn randperm(
    n: usize,
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor, RngError> {
    const OP: &str = "randperm";
    let generator = generator_for(OP, device, generator)?;
    if let Device::Cuda(ordinal) = device {
        let key = generator.reserve(RandomOp::Randperm, DType::I64, n as u64);
        return cuda_dispatch::randperm(n as u64, key, ordinal);
    }
    let mut perm = alloc::<i64>(n, 0)?;
    let mut draws = alloc::<i64>(n.saturating_sub(1), 0)?;
    let key = generator.reserve(RandomOp::Randperm, DType::I64, n as u64);
    let count = n as u64;
    fill(
        &mut draws,
        key,
        Layout::per_element(2),
        |k, w, out: &mut [i64]| {
            // Draw k is for i = n-1-k, uniform in [0, i + 1) = [0, n - k).
            out[0] = below(w[0], w[1], count - k) as i64;
        },
    );
    for (i, value) in perm.iter_mut().enumerate() {
        *value = i as i64;
    }
    for (k, &j) in draws.iter().enumerate() {
        perm.swap(n - 1 - k, j as usize);
    }
    cpu_tensor(perm, &[n])
}
