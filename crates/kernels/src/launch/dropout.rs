//! Dropout forward and backward on CUDA buffers (one of the places dropout's pieces
//! live; rng-gen's `ops/dropout/mod.rs` lists them all).
//!
//! Forward keeps element `i` iff its uniform `u >= p` and writes `x * scale` there (0
//! elsewhere), where `scale = 1 / (1 - p)` is computed once in f32 by the caller so CPU
//! and GPU use the same value. The product is taken in f32 for f32 / f16 / bf16 (then
//! rounded) and in f64 for f64. It can also write the 1-bit packed mask
//! ([`crate::mask`]). Backward gets the keep pattern back from that mask, or by
//! regenerating it from the forward's `(seed, offset)`; either way it never needs a
//! byte per element. The kernel bodies are in `cuda/dropout.cuh`.

use tensor_core::cuda::CudaStorage;
use tensor_core::{DType, TensorError};

use super::{check_range, kernel_name, same_device, Arg, KernelCall};
use crate::error::{KernelError, Result};
use crate::grid::Launch;
use crate::mask::packed_mask_words;
use crate::nvrtc::RANDOM_SOURCE;

const SUPPORTED: &[DType] = &[DType::F32, DType::F16, DType::BF16, DType::F64];
const SUPPORTED_TEXT: &str = "f32, f16, bf16, f64";

/// Dropout forward, `ditto_dropout_<T>_kernel(seed, offset, n, p, scale, const T* x,
/// u32* mask, T* y)`: reads `x` from element `x_offset`; writes the keep bits into
/// `mask` (`packed_mask_words(n)` u32 words) when given, a null pointer otherwise. Threads
/// own single blocks of elements, and whole mask words in a second loop, so no atomics
/// are needed.
pub fn dropout_call<'a>(
    x: &'a CudaStorage,
    x_offset: usize,
    mask: Option<&'a mut CudaStorage>,
    p: f32,
    scale: f32,
) -> Result<KernelCall<'a>> {
    let kernel = kernel_name("dropout", x.dtype(), SUPPORTED, SUPPORTED_TEXT)?;
    let mask = match mask {
        Some(m) => Arg::Output(m, 0),
        None => Arg::Null,
    };
    Ok(KernelCall {
        source: &RANDOM_SOURCE,
        kernel,
        args: vec![Arg::F32(p), Arg::F32(scale), Arg::Input(x, x_offset), mask],
        elements_per_item: 4,
    })
}

/// Dropout backward, `ditto_dropout_backward_<T>_kernel(seed, offset, n, p, scale,
/// const u32* mask, const T* grad, T* grad_in)`: `grad_in = grad * scale` where the
/// forward kept the element, else 0. With `mask` the keep bits are read from it (seed,
/// offset and `p` unused); without, they are regenerated from the launch's
/// `(seed, offset)` and `p`.
pub fn dropout_backward_call<'a>(
    grad: &'a CudaStorage,
    grad_offset: usize,
    mask: Option<&'a CudaStorage>,
    p: f32,
    scale: f32,
) -> Result<KernelCall<'a>> {
    let kernel = kernel_name("dropout_backward", grad.dtype(), SUPPORTED, SUPPORTED_TEXT)?;
    let mask = match mask {
        Some(m) => Arg::Input(m, 0),
        None => Arg::Null,
    };
    Ok(KernelCall {
        source: &RANDOM_SOURCE,
        kernel,
        args: vec![
            Arg::F32(p),
            Arg::F32(scale),
            mask,
            Arg::Input(grad, grad_offset),
        ],
        elements_per_item: 4,
    })
}

/// Dropout forward on whole buffers: `y = dropout(x)` with the op's reserved
/// `(seed, offset)`. `y` must match `x` in length and dtype; `mask`, when given, must be a
/// u32 buffer of [`packed_mask_words`]`(n)` words and receives the keep bits.
#[allow(clippy::too_many_arguments)]
pub fn dropout(
    x: &CudaStorage,
    y: &mut CudaStorage,
    mask: Option<&mut CudaStorage>,
    seed: u64,
    offset: u64,
    p: f32,
    scale: f32,
    launch: Launch,
) -> Result<()> {
    check_pass("dropout", x, y, mask.as_deref())?;
    let n = x.len() as u64;
    dropout_call(x, 0, mask, p, scale)?.launch(seed, offset, n, y, 0, launch)
}

/// Where dropout backward gets the keep pattern of the forward pass from.
#[derive(Clone, Copy, Debug)]
pub enum KeepSource<'a> {
    /// The packed mask the forward wrote.
    Mask(&'a CudaStorage),
    /// Recompute it from the forward's reserved `(seed, offset)` (no memory at all).
    Regenerate {
        /// The forward's seed.
        seed: u64,
        /// The forward's base offset.
        offset: u64,
    },
}

/// Dropout backward on whole buffers: `grad_in = grad * scale` where the forward kept
/// the element, else 0. `p` and `scale` must be the forward's (`p` is only read when
/// regenerating).
pub fn dropout_backward(
    grad: &CudaStorage,
    grad_in: &mut CudaStorage,
    keep: KeepSource<'_>,
    p: f32,
    scale: f32,
    launch: Launch,
) -> Result<()> {
    let (seed, offset, mask) = match keep {
        KeepSource::Mask(m) => (0, 0, Some(m)),
        KeepSource::Regenerate { seed, offset } => (seed, offset, None),
    };
    check_pass("dropout_backward", grad, grad_in, mask)?;
    let n = grad.len() as u64;
    dropout_backward_call(grad, 0, mask, p, scale)?.launch(seed, offset, n, grad_in, 0, launch)
}

/// The checks both whole-buffer passes make before anything is queued, in this order:
/// the input's dtype, the output (same device, dtype, length), then the packed mask (u32,
/// `ceil(n / 32)` words, same device).
fn check_pass(
    op: &'static str,
    input: &CudaStorage,
    output: &CudaStorage,
    mask: Option<&CudaStorage>,
) -> Result<()> {
    kernel_name(op, input.dtype(), SUPPORTED, SUPPORTED_TEXT)?;
    same_device(op, input, output)?;
    if output.dtype() != input.dtype() {
        return Err(TensorError::DTypeMismatch {
            op,
            expected: input.dtype(),
            got: output.dtype(),
        }
        .into());
    }
    let n = input.len() as u64;
    check_len(op, "the output", output, n)?;
    if let Some(m) = mask {
        same_device(op, input, m)?;
        if m.dtype() != DType::U32 {
            return Err(TensorError::DTypeMismatch {
                op,
                expected: DType::U32,
                got: m.dtype(),
            }
            .into());
        }
        check_len(op, "the packed mask", m, packed_mask_words(n))?;
    }
    Ok(())
}

/// Errors unless `storage` holds exactly `expected` elements.
fn check_len(op: &'static str, what: &str, storage: &CudaStorage, expected: u64) -> Result<()> {
    check_range(op, what, storage, 0, expected)?;
    if storage.len() as u64 == expected {
        Ok(())
    } else {
        Err(KernelError::InvalidArgument {
            op,
            message: format!("{what} has {} elements, expected {expected}", storage.len()),
        })
    }
}
