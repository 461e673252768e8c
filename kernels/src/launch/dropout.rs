//! Launchers of dropout forward and backward.
//!
//! Forward keeps element `i` iff its uniform `u >= p` and writes `x * scale` there (0
//! elsewhere), where `scale = 1 / (1 - p)` is computed once in f32 by the caller so CPU
//! and GPU use the same value. The product is taken in f32 for f32 / f16 / bf16 (then
//! rounded) and in f64 for f64. It can also write the 1-bit packed mask
//! ([`crate::mask`]). Backward gets the keep pattern back from that mask, or by
//! regenerating it from the forward's `(seed, offset)`; either way it never needs a
//! byte per element.

use cudarc::driver::PushKernelArg;
use tensor_core::cuda::CudaStorage;
use tensor_core::DType;

use super::{check_len, kernel_name, launch_config, launch_failed, same_device};
use crate::error::Result;
use crate::grid::Launch;
use crate::mask::packed_mask_words;
use crate::module_cache;

const SUPPORTED: &[DType] = &[DType::F32, DType::F16, DType::BF16, DType::F64];
const SUPPORTED_TEXT: &str = "f32, f16, bf16, f64";

/// Dropout forward: `y = dropout(x)` with the op's reserved `(seed, offset)`.
///
/// `y` must match `x` in length and dtype; `mask`, when given, must be a u32 buffer of
/// [`packed_mask_words`]`(n)` words and receives the keep bits.
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
    let name = checked_kernel("dropout", x, y, mask.as_deref())?;
    let n = x.len() as u64;
    if n == 0 {
        return Ok(());
    }
    let ordinal = x.ordinal();
    let func = module_cache::function(ordinal, &name)?;
    // With a mask each thread owns whole mask words (32 elements), otherwise blocks.
    let items = if mask.is_some() {
        packed_mask_words(n)
    } else {
        n.div_ceil(4)
    };
    let cfg = launch_config(ordinal, items, launch)?;
    let stream = y.stream()?;
    let null: u64 = 0;
    let mut args = stream.launch_builder(&func);
    args.arg(&seed).arg(&offset).arg(&n).arg(&p).arg(&scale);
    args.arg(x.bytes()).arg(y.bytes_mut());
    match mask {
        Some(m) => args.arg(m.bytes_mut()),
        None => args.arg(&null),
    };
    // SAFETY: matches `ditto_dropout_*(u64 seed, u64 offset, u64 n, f32 p, f32 scale,
    // const T* x, T* y, u32* mask)`; x and y hold n elements of T, mask (or null) holds
    // ceil(n / 32) words, checked above.
    unsafe { args.launch(cfg) }.map_err(launch_failed(ordinal, &name))?;
    Ok(())
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

/// Dropout backward: `grad_in = grad * scale` where the forward kept the element, else
/// 0. `p` and `scale` must be the forward's (`p` is only read when regenerating).
pub fn dropout_backward(
    grad: &CudaStorage,
    grad_in: &mut CudaStorage,
    keep: KeepSource<'_>,
    p: f32,
    scale: f32,
    launch: Launch,
) -> Result<()> {
    // The kernel reads the mask when given one, else regenerates from (seed, offset).
    let (seed, offset, mask) = match keep {
        KeepSource::Mask(m) => (0, 0, Some(m)),
        KeepSource::Regenerate { seed, offset } => (seed, offset, None),
    };
    let name = checked_kernel("dropout_backward", grad, grad_in, mask)?;
    let n = grad.len() as u64;
    if n == 0 {
        return Ok(());
    }
    let ordinal = grad.ordinal();
    let func = module_cache::function(ordinal, &name)?;
    let cfg = launch_config(ordinal, n.div_ceil(4), launch)?;
    let stream = grad_in.stream()?;
    let null: u64 = 0;
    let mut args = stream.launch_builder(&func);
    args.arg(&seed).arg(&offset).arg(&n).arg(&p).arg(&scale);
    match mask {
        Some(m) => args.arg(m.bytes()),
        None => args.arg(&null),
    };
    args.arg(grad.bytes()).arg(grad_in.bytes_mut());
    // SAFETY: matches `ditto_dropout_backward_*(u64 seed, u64 offset, u64 n, f32 p,
    // f32 scale, const u32* mask, const T* grad, T* grad_in)`; lengths checked above.
    unsafe { args.launch(cfg) }.map_err(launch_failed(ordinal, &name))?;
    Ok(())
}

/// The checks both passes make before anything is queued, in this order: the input's
/// dtype (giving the kernel's name), the output, then the packed mask when there is one.
/// Kept in one place so forward and backward refuse the same buffers the same way.
fn checked_kernel(
    op: &'static str,
    input: &CudaStorage,
    output: &CudaStorage,
    mask: Option<&CudaStorage>,
) -> Result<String> {
    let name = kernel_name(op, input.dtype(), SUPPORTED, SUPPORTED_TEXT)?;
    check_output(op, input, output)?;
    if let Some(m) = mask {
        check_mask(op, input, m, input.len() as u64)?;
    }
    Ok(name)
}

/// The output of an elementwise dropout pass: same device, dtype and length as input.
fn check_output(op: &'static str, input: &CudaStorage, output: &CudaStorage) -> Result<()> {
    same_device(op, input, output)?;
    if output.dtype() != input.dtype() {
        return Err(tensor_core::TensorError::DTypeMismatch {
            op,
            expected: input.dtype(),
            got: output.dtype(),
        }
        .into());
    }
    check_len(op, "the output", output, input.len() as u64)
}

/// A packed mask for `n` elements: u32, `ceil(n / 32)` words, same device.
fn check_mask(op: &'static str, input: &CudaStorage, mask: &CudaStorage, n: u64) -> Result<()> {
    same_device(op, input, mask)?;
    if mask.dtype() != DType::U32 {
        return Err(tensor_core::TensorError::DTypeMismatch {
            op,
            expected: DType::U32,
            got: mask.dtype(),
        }
        .into());
    }
    check_len(op, "the packed mask", mask, packed_mask_words(n))
}
