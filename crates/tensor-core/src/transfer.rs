//! Moving tensors between devices.
//!
//! Every copy goes through a contiguous host buffer of exactly the view's elements, so
//! the result is always row-major with offset 0. Cuda -> Cuda across ordinals also goes
//! through the host (simple, and the rate of such moves in ditto is low).

#[cfg(feature = "cuda")]
use crate::{cuda::CudaStorage, Storage};
use crate::{DType, Device, Result, Tensor};

impl Tensor {
    /// Moves the tensor to `device` (a shared clone when it is already there). Errors
    /// with `CudaError::Unavailable` when the CUDA device does not exist, there is no driver, or
    /// ditto was built without the `cuda` feature.
    #[track_caller]
    pub fn to_device(&self, device: Device) -> Result<Tensor> {
        audited!("to_device", [self], { self.moved_to(device) })
    }

    /// Overwrites this contiguous CUDA tensor's elements with those of `src` (a CPU
    /// tensor of the same dims and dtype): one upload into the buffer this tensor
    /// already has, shared with every clone of it (no copy-on-write, unlike ditto's
    /// other in-place ops). For the inputs of a CUDA graph (PyTorch's
    /// `static_input.copy_(batch)`): a replay reads the buffer the capture saw, which
    /// layers that kept the input share. Errors for a CPU tensor, a strided view, a
    /// mismatch, or during a capture of the device.
    pub fn copy_from_host_shared(&self, src: &Tensor) -> Result<()> {
        const OP: &str = "copy_from_host_shared";
        self.require_same_dims(OP, src)?;
        if src.dtype() != self.dtype() {
            return Err(crate::TensorError::DTypeMismatch {
                op: OP,
                expected: self.dtype(),
                got: src.dtype(),
            });
        }
        if src.device() != Device::Cpu || !self.is_contiguous() {
            return Err(crate::TensorError::InvalidArgument {
                op: OP,
                message: format!(
                    "needs a contiguous CUDA tensor and a CPU source, got a {} tensor on {} and a source on {}",
                    if self.is_contiguous() { "contiguous" } else { "strided" },
                    self.device(),
                    src.device()
                ),
            });
        }
        match self.storage() {
            #[cfg(feature = "cuda")]
            Storage::Cuda(storage) => {
                let host = src.contiguous()?;
                let exact = if host.offset == 0 && host.cpu_storage()?.len() == host.elem_count() {
                    std::borrow::Cow::Borrowed(host.cpu_storage()?)
                } else {
                    std::borrow::Cow::Owned(host.narrow_storage()?)
                };
                storage.write_from_cpu_shared(self.offset, &exact)
            }
            _ => Err(crate::TensorError::NotImplementedOnDevice {
                op: OP,
                device: self.device(),
            }),
        }
    }

    /// [`Tensor::to_device`] without an audit record, for ditto's own internal copies
    /// (reading elements, creating tensors), which are not ops of the user's program.
    pub(crate) fn moved_to(&self, device: Device) -> Result<Tensor> {
        if device == self.device() {
            return Ok(self.clone());
        }
        let host = self.to_host()?;
        match device {
            Device::Cpu => Ok(host),
            Device::Cuda(ordinal) => upload(&host, ordinal),
        }
    }

    /// A CPU copy (or the tensor itself if on the CPU).
    fn to_host(&self) -> Result<Tensor> {
        match self.storage() {
            crate::Storage::Cpu(_) => Ok(self.clone()),
            #[cfg(feature = "cuda")]
            Storage::Cuda(s) => {
                if self.is_contiguous() {
                    let cpu = s.to_cpu_range(self.offset, self.elem_count())?;
                    return Tensor::from_cpu_storage(cpu, self.dims());
                }
                let whole = Tensor {
                    storage: std::sync::Arc::new(Storage::Cpu(s.to_cpu()?)),
                    ..self.clone()
                };
                whole.contiguous()
            }
        }
    }
}

/// Uploads a CPU tensor's elements (only those of the view) to CUDA device `ordinal`.
#[cfg(feature = "cuda")]
fn upload(host: &Tensor, ordinal: usize) -> Result<Tensor> {
    let host = host.contiguous()?;
    let cpu = host.cpu_storage()?;
    let device = if host.offset == 0 && cpu.len() == host.elem_count() {
        CudaStorage::from_cpu(cpu, ordinal)?
    } else {
        let exact = host.narrow_storage()?;
        CudaStorage::from_cpu(&exact, ordinal)?
    };
    Tensor::from_storage(Storage::Cuda(device), host.dims())
}

#[cfg(not(feature = "cuda"))]
fn upload(_host: &Tensor, ordinal: usize) -> Result<Tensor> {
    Err(crate::cuda::disabled(ordinal))
}

impl Tensor {
    /// A host buffer holding exactly this contiguous CPU tensor's elements.
    #[cfg(feature = "cuda")]
    fn narrow_storage(&self) -> Result<crate::CpuStorage> {
        with_dtype!(self.dtype(), T => {
            use crate::Element;
            Ok(T::into_storage(self.as_slice::<T>()?.to_vec()))
        })
    }
}

/// A zeroed tensor allocated directly on a CUDA device (no host buffer, no copy).
pub(crate) fn zeros_on(dims: &[usize], dtype: DType, ordinal: usize) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    {
        let shape = crate::Shape::new(dims)?;
        let storage = CudaStorage::alloc(ordinal, dtype, shape.elem_count())?;
        Tensor::from_storage(Storage::Cuda(storage), dims)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (dims, dtype);
        Err(crate::cuda::disabled(ordinal))
    }
}
