//! Dropout backward: `grad * scale` where the forward kept the element, `+0` elsewhere,
//! with the keep pattern read from the saved packed mask or regenerated from the saved
//! key (the forward sampler again, on the gradient, at the forward's key).

use half::{bf16, f16};
use tensor_core::{DType, Storage, Tensor, TensorError};

use super::forward::{DropoutFloat, DropoutForward, MaskOut};
use super::mask::{apply, mask_len};
use super::{DropoutState, PackedMask};
use crate::ops::args::{check_float, probability};
use crate::ops::pipeline::{run_recorded, Stream, Target};
use crate::RngError;

/// Backward of [`dropout`](super::dropout): `grad * scale` where the forward pass kept
/// the element, 0 elsewhere; the mask is read from `state.packed_mask` or regenerated
/// from `state.key` (drawing nothing from any generator). Identity for eval mode and
/// `p = 0`. Errors unless `grad` is a float tensor with the forward input's element
/// count.
#[track_caller]
pub fn dropout_backward(grad: &Tensor, state: &DropoutState) -> Result<Tensor, RngError> {
    const OP: &str = "dropout_backward";
    check_float(OP, grad.dtype())?;
    let n = grad.elem_count();
    if n as u64 != state.n {
        return Err(RngError::DropoutSizeMismatch {
            expected: state.n,
            got: n as u64,
        });
    }
    if let Some(mask) = &state.packed_mask {
        if mask.len() != mask_len(n) {
            return Err(RngError::InconsistentState {
                reason: "dropout packed mask length does not match the element count",
            });
        }
    }
    if state.is_identity() {
        return Ok(grad.clone());
    }
    let p = probability(OP, state.p)?;
    let grad = grad.contiguous()?;
    match (&state.packed_mask, grad.dtype()) {
        (Some(mask), DType::F32) => with_mask::<f32>(&grad, mask, state.scale),
        (Some(mask), DType::F64) => with_mask::<f64>(&grad, mask, state.scale),
        (Some(mask), DType::F16) => with_mask::<f16>(&grad, mask, state.scale),
        (Some(mask), _) => with_mask::<bf16>(&grad, mask, state.scale),
        (None, DType::F32) => regenerate::<f32>(&grad, p, state),
        (None, DType::F64) => regenerate::<f64>(&grad, p, state),
        (None, DType::F16) => regenerate::<f16>(&grad, p, state),
        (None, _) => regenerate::<bf16>(&grad, p, state),
    }
}

/// The forward sampler on `grad` at the forward's key: the same keep pattern, the same
/// arithmetic, on the CPU or CUDA alike.
#[track_caller]
fn regenerate<T: DropoutFloat>(
    grad: &Tensor,
    p: f32,
    state: &DropoutState,
) -> Result<Tensor, RngError> {
    let sampler = DropoutForward::<T> {
        op: "dropout_backward",
        x: match grad.storage() {
            Storage::Cpu(_) => grad.as_slice::<T>()?,
            #[allow(unreachable_patterns)]
            _ => &[],
        },
        #[cfg(feature = "cuda")]
        x_cuda: match grad.storage() {
            Storage::Cuda(s) => Some((s, grad.storage_offset())),
            _ => None,
        },
        p,
        scale: state.scale,
        mask: MaskOut::None,
    };
    let target = Target::New {
        dims: grad.dims(),
        device: grad.device(),
    };
    let ran = run_recorded(sampler, target, Stream::At(state.key), &[grad])?;
    Ok(ran.tensor.expect("a new target gives a tensor"))
}

/// `grad * scale` where `mask` keeps, +0 elsewhere, on the contiguous `grad`.
#[track_caller]
fn with_mask<T: DropoutFloat>(
    grad: &Tensor,
    mask: &PackedMask,
    scale: f32,
) -> Result<Tensor, RngError> {
    match grad.storage() {
        Storage::Cpu(_) => {
            let words = match mask {
                PackedMask::Host(words) => std::borrow::Cow::Borrowed(words.as_slice()),
                #[allow(unreachable_patterns)]
                _ => std::borrow::Cow::Owned(mask.words()?),
            };
            let out = apply(grad.as_slice::<T>()?, &words, T::zero(), move |v: T| {
                v.kept(scale)
            })?;
            Ok(Tensor::from_vec(out, grad.dims(), grad.device())?)
        }
        #[cfg(feature = "cuda")]
        Storage::Cuda(storage) => with_mask_cuda(grad, storage, mask, scale),
        #[allow(unreachable_patterns)]
        _ => Err(TensorError::NotImplementedOnDevice {
            op: "dropout_backward",
            device: grad.device(),
        }
        .into()),
    }
}

/// [`with_mask`] on a CUDA gradient: the backward kernel reading the mask where the
/// forward left it on this device (a host mask, or one on another device, is uploaded).
#[cfg(feature = "cuda")]
#[track_caller]
fn with_mask_cuda(
    grad: &Tensor,
    storage: &tensor_core::cuda::CudaStorage,
    mask: &PackedMask,
    scale: f32,
) -> Result<Tensor, RngError> {
    use tensor_core::cuda::CudaStorage;
    use tensor_core::CpuStorage;

    let ordinal = storage.ordinal();
    let n = grad.elem_count();
    // The kernel writes every element of the gradient.
    let mut out = CudaStorage::alloc_uninit(ordinal, grad.dtype(), n)?;
    let uploaded;
    let on_device: &CudaStorage = match mask {
        PackedMask::Device(m) if m.ordinal() == ordinal => m,
        _ => {
            uploaded = CudaStorage::from_cpu(&CpuStorage::U32(mask.words()?), ordinal)?;
            &uploaded
        }
    };
    let kernel_error = |e: kernels::KernelError| RngError::Tensor(e.into_tensor_error(ordinal));
    let call = kernels::launch::dropout_backward_call(
        storage,
        grad.storage_offset(),
        Some(on_device),
        0.0,
        scale,
    )
    .map_err(kernel_error)?;
    // The mask replaces the stream: seed and offset are unused.
    call.launch(0, 0, n as u64, &mut out, 0, kernels::Launch::Auto)
        .map_err(kernel_error)?;
    Ok(Tensor::from_storage(Storage::Cuda(out), grad.dims())?)
}
