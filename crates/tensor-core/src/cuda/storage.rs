//! `CudaStorage`: a typed buffer on one CUDA device, held as raw bytes.

use std::fmt;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use super::copy::{download_range, host_bytes};
use super::registry::guarded;
use super::{default_stream, driver_error};
use crate::{CpuStorage, DType, Device, Result, TensorError};

/// A device buffer of `len` elements of one [`DType`] on CUDA device `ordinal`.
///
/// The bytes are untyped (`CudaSlice<u8>`) so one type serves every dtype; kernels
/// reinterpret them. Bool uses one byte per element (0 or 1). The buffer is allocated
/// on, and ordered by, the device's [`default_stream`]. It always holds at least one
/// byte (CUDA rejects empty allocations), so `bytes().len()` can exceed
/// `len * dtype.size_in_bytes()` for an empty tensor.
pub struct CudaStorage {
    bytes: CudaSlice<u8>,
    dtype: DType,
    len: usize,
    ordinal: usize,
}

impl CudaStorage {
    /// Bytes needed for `len` elements of `dtype`, or an error if that overflows.
    fn byte_len(ordinal: usize, dtype: DType, len: usize) -> Result<usize> {
        len.checked_mul(dtype.size_in_bytes())
            .ok_or(TensorError::AllocationFailed {
                device: Device::Cuda(ordinal),
                dtype,
                elements: len,
            })
    }

    /// A zero-filled buffer of `len` elements (zero bits: 0, 0.0 and `false`).
    pub fn alloc(ordinal: usize, dtype: DType, len: usize) -> Result<Self> {
        let n_bytes = Self::byte_len(ordinal, dtype, len)?;
        let stream = default_stream(ordinal)?;
        // Guarded, like every driver call here: a driver lacking a symbol is a typed error.
        let bytes = guarded(ordinal, || {
            stream
                .alloc_zeros::<u8>(n_bytes.max(1))
                .map_err(driver_error(ordinal, "alloc"))
        })?;
        Ok(CudaStorage {
            bytes,
            dtype,
            len,
            ordinal,
        })
    }

    /// Uploads a host buffer to device `ordinal`.
    pub fn from_cpu(cpu: &CpuStorage, ordinal: usize) -> Result<Self> {
        let data = host_bytes(cpu);
        let stream = default_stream(ordinal)?;
        let bytes = guarded(ordinal, || {
            let mut bytes = stream
                .alloc_zeros::<u8>(data.len().max(1))
                .map_err(driver_error(ordinal, "from_cpu"))?;
            if !data.is_empty() {
                stream
                    .memcpy_htod(&*data, &mut bytes)
                    .map_err(driver_error(ordinal, "from_cpu"))?;
            }
            Ok(bytes)
        })?;
        Ok(CudaStorage {
            bytes,
            dtype: cpu.dtype(),
            len: cpu.len(),
            ordinal,
        })
    }

    /// Copies the whole buffer to the host (waits for queued work and the copy).
    pub fn to_cpu(&self) -> Result<CpuStorage> {
        self.to_cpu_range(0, self.len)
    }

    /// Copies elements `start..start + len` to the host. Errors if the range leaves the
    /// buffer.
    pub fn to_cpu_range(&self, start: usize, len: usize) -> Result<CpuStorage> {
        if start.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(TensorError::InvalidArgument {
                op: "to_cpu_range",
                message: format!(
                    "range {start}..{start}+{len} does not fit in a buffer of {} elements",
                    self.len
                ),
            });
        }
        let stream = self.bytes.stream().clone();
        guarded(self.ordinal, || {
            download_range(&stream, &self.bytes, self.dtype, self.ordinal, start, len)
        })
    }

    /// A deep copy on the same device, reporting allocation failure as an error.
    pub fn try_clone(&self) -> Result<Self> {
        let bytes = guarded(self.ordinal, || {
            self.bytes
                .try_clone()
                .map_err(driver_error(self.ordinal, "clone"))
        })?;
        Ok(CudaStorage { bytes, ..*self })
    }

    /// The element type held.
    #[must_use]
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Number of elements held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no elements are held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The CUDA device ordinal.
    #[must_use]
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The raw device bytes, for kernels to read.
    #[must_use]
    pub fn bytes(&self) -> &CudaSlice<u8> {
        &self.bytes
    }

    /// The raw device bytes, for kernels to write.
    pub fn bytes_mut(&mut self) -> &mut CudaSlice<u8> {
        &mut self.bytes
    }

    /// The stream this buffer is ordered on (the device's default stream).
    pub fn stream(&self) -> Result<Arc<CudaStream>> {
        Ok(self.bytes.stream().clone())
    }
}

/// Frees the buffer from any thread. cudarc frees on the calling thread's current
/// context (`cuMemFreeAsync` on its default stream where the device has memory pools), so
/// a tensor dropped on a thread that never used this device would fail to free, leak,
/// and leave the error for the device's next call; binding the buffer's context first
/// makes the free valid wherever the last reference goes.
impl Drop for CudaStorage {
    fn drop(&mut self) {
        // An error here (a device already in a failed state) is recorded by cudarc on the
        // context and reported by its next call, which is all a destructor can do.
        let _ = self.bytes.context().bind_to_thread();
    }
}

/// Deep copy on the device. Panics if the device allocation fails; ditto itself uses
/// [`CudaStorage::try_clone`].
impl Clone for CudaStorage {
    fn clone(&self) -> Self {
        CudaStorage {
            bytes: self.bytes.clone(),
            ..*self
        }
    }
}

impl fmt::Debug for CudaStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaStorage")
            .field("dtype", &self.dtype)
            .field("len", &self.len)
            .field("ordinal", &self.ordinal)
            .finish_non_exhaustive()
    }
}
