//! `CudaStorage`: a typed buffer on one CUDA device, held as raw bytes.

use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use cuda_runtime::allocator::{allocate, allocate_uncached, release};
use cuda_runtime::{guarded, refuse_during_capture, CudaError};

use super::copy::{download_range, host_bytes};
use super::driver_error;
use crate::{CpuStorage, DType, Device, Result, TensorError};

/// A device buffer of `len` elements of one [`DType`] on CUDA device `ordinal`.
///
/// The bytes are untyped (`CudaSlice<u8>`) so one type serves every dtype; kernels
/// reinterpret them. Bool uses one byte per element (0 or 1). The buffer is allocated
/// on, and ordered by, the device's [`default_stream`](super::default_stream), and comes
/// from the device's caching allocator ([`super::allocator`]): `bytes().len()` is the
/// block's size class, at least one byte, and can exceed `len * dtype.size_in_bytes()`.
/// Dropping the storage returns the block to the cache.
pub struct CudaStorage {
    /// Taken back by the allocator in `drop`, never before.
    bytes: ManuallyDrop<CudaSlice<u8>>,
    /// The CUDA graph pool the block returns to (made during a capture), if any.
    graph_pool: Option<u64>,
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

    /// The runtime's out-of-memory error for `len` elements of `dtype`, in the tensor
    /// terms the user asked in; any other error as it is.
    fn out_of_memory(dtype: DType, len: usize) -> impl FnOnce(CudaError) -> TensorError {
        move |e| match e {
            CudaError::OutOfMemory {
                ordinal,
                bytes,
                during_capture: Some(cached_bytes),
            } => TensorError::CaptureOutOfMemory {
                ordinal,
                dtype,
                elements: len,
                bytes,
                cached_bytes,
            },
            CudaError::OutOfMemory { ordinal, .. } => TensorError::AllocationFailed {
                device: Device::Cuda(ordinal),
                dtype,
                elements: len,
            },
            other => other.into(),
        }
    }

    /// A zero-filled buffer of `len` elements (zero bits: 0, 0.0 and `false`).
    pub fn alloc(ordinal: usize, dtype: DType, len: usize) -> Result<Self> {
        let mut storage = Self::alloc_uninit(ordinal, dtype, len)?;
        let stream = storage.bytes.stream().clone();
        guarded(ordinal, || {
            stream
                .memset_zeros(&mut *storage.bytes)
                .map_err(driver_error(ordinal, "alloc"))
        })?;
        Ok(storage)
    }

    /// A buffer of `len` elements whose contents are unspecified (whatever the block's
    /// previous owner left; plain device bytes, never undefined behaviour), for outputs
    /// a kernel writes completely: filling them with zeros first would be a memset per
    /// op for nothing (`torch.empty`).
    pub fn alloc_uninit(ordinal: usize, dtype: DType, len: usize) -> Result<Self> {
        let n_bytes = Self::byte_len(ordinal, dtype, len)?;
        let (bytes, graph_pool) =
            allocate(ordinal, n_bytes).map_err(Self::out_of_memory(dtype, len))?;
        Ok(CudaStorage {
            bytes: ManuallyDrop::new(bytes),
            graph_pool,
            dtype,
            len,
            ordinal,
        })
    }

    /// [`alloc_uninit`](Self::alloc_uninit), but new memory from the driver, never a
    /// block the allocator's cache or a CUDA graph's pool held. For a buffer the host
    /// writes between replays of a graph that reads it: during a capture any cached
    /// block may be one the capture's own nodes write, and a replay would overwrite the
    /// host's values there (see [`super::allocator`]). Dropped, its block joins the
    /// shared cache. Costs a driver call each time: for long-lived buffers only.
    pub fn alloc_uninit_uncached(ordinal: usize, dtype: DType, len: usize) -> Result<Self> {
        let n_bytes = Self::byte_len(ordinal, dtype, len)?;
        let bytes = allocate_uncached(ordinal, n_bytes).map_err(Self::out_of_memory(dtype, len))?;
        Ok(CudaStorage {
            bytes: ManuallyDrop::new(bytes),
            graph_pool: None,
            dtype,
            len,
            ordinal,
        })
    }

    /// Uploads a host buffer to device `ordinal`.
    pub fn from_cpu(cpu: &CpuStorage, ordinal: usize) -> Result<Self> {
        refuse_during_capture(ordinal, "an upload from the host")?;
        let data = host_bytes(cpu);
        let storage = Self::alloc_uninit(ordinal, cpu.dtype(), cpu.len())?;
        storage.upload_at(0, &data)?;
        Ok(storage)
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
        refuse_during_capture(self.ordinal, "a read to the host")?;
        let stream = self.bytes.stream().clone();
        guarded(self.ordinal, || {
            download_range(&stream, &self.bytes, self.dtype, self.ordinal, start, len)
        })
    }

    /// Uploads `cpu` (this buffer's dtype) over elements `start..start + cpu.len()`, in
    /// place, through a shared reference: every tensor sharing this buffer sees the new
    /// values. That is what a CUDA graph's input needs (a replay reads the very buffer
    /// the capture saw, shared by the layers that kept the input), and why it is not
    /// copy-on-write like ditto's other in-place ops. Errors during a capture.
    pub fn write_from_cpu_shared(&self, start: usize, cpu: &CpuStorage) -> Result<()> {
        refuse_during_capture(self.ordinal, "an upload from the host")?;
        let fits = start
            .checked_add(cpu.len())
            .is_some_and(|end| end <= self.len);
        if cpu.dtype() != self.dtype || !fits {
            return Err(TensorError::InvalidArgument {
                op: "write_from_cpu_shared",
                message: format!(
                    "{} elements of {} at {start} do not fit a buffer of {} elements of {}",
                    cpu.len(),
                    cpu.dtype(),
                    self.len,
                    self.dtype
                ),
            });
        }
        self.upload_at(start * self.dtype.size_in_bytes(), &host_bytes(cpu))
    }

    /// Queues a copy of `data` into this buffer at byte `at` on its stream, through a
    /// pinned staging buffer (`cuda_runtime::staging`): the host does not wait for the GPU, and
    /// `data` may change as soon as this returns.
    fn upload_at(&self, at: usize, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        debug_assert!(at + data.len() <= self.len * self.dtype.size_in_bytes());
        let stream = self.bytes.stream().clone();
        guarded(self.ordinal, || {
            use cudarc::driver::DevicePtr;
            stream
                .context()
                .bind_to_thread()
                .map_err(driver_error(self.ordinal, "upload"))?;
            let (base, _sync) = self.bytes.device_ptr(&stream);
            // SAFETY: `at..at + data.len()` lies inside this buffer (its callers check),
            // the copy is queued on the buffer's stream, after all earlier work on it,
            // and the buffer's memory is only reused through that stream, so after it.
            unsafe {
                cuda_runtime::staging::upload(
                    self.ordinal,
                    stream.cu_stream(),
                    base + at as u64,
                    data,
                )
            }
        })?;
        Ok(())
    }

    /// Copies `len` elements from `src` (same dtype and device) starting at `src_start`
    /// into this buffer at `start`: one device-to-device copy, no kernel.
    pub(crate) fn copy_elements_from(
        &mut self,
        start: usize,
        src: &CudaStorage,
        src_start: usize,
        len: usize,
    ) -> Result<()> {
        let size = self.dtype.size_in_bytes();
        let stream = self.bytes.stream().clone();
        let from = src.bytes.slice(src_start * size..(src_start + len) * size);
        let mut to = self.bytes.slice_mut(start * size..(start + len) * size);
        guarded(self.ordinal, || {
            stream
                .memcpy_dtod(&from, &mut to)
                .map_err(driver_error(self.ordinal, "copy"))
        })?;
        Ok(())
    }

    /// A deep copy on the same device, reporting allocation failure as an error.
    pub fn try_clone(&self) -> Result<Self> {
        let mut copy = Self::alloc_uninit(self.ordinal, self.dtype, self.len)?;
        let n_bytes = self.len * self.dtype.size_in_bytes();
        if n_bytes > 0 {
            let stream = self.bytes.stream().clone();
            guarded(self.ordinal, || {
                let mut dst = copy.bytes.slice_mut(..n_bytes);
                stream
                    .memcpy_dtod(&self.bytes.slice(..n_bytes), &mut dst)
                    .map_err(driver_error(self.ordinal, "clone"))
            })?;
        }
        Ok(copy)
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

/// Returns the block to the device's cache: no driver call, so valid on any thread.
/// Later work on the device's one stream may reuse it; it is ordered after every use
/// made through this storage.
impl Drop for CudaStorage {
    fn drop(&mut self) {
        // SAFETY: `bytes` is taken exactly once, here, and never touched again.
        let block = unsafe { ManuallyDrop::take(&mut self.bytes) };
        release(self.ordinal, block, self.graph_pool);
    }
}

/// Deep copy on the device. Panics if the device allocation fails; ditto itself uses
/// [`CudaStorage::try_clone`].
impl Clone for CudaStorage {
    fn clone(&self) -> Self {
        self.try_clone()
            .unwrap_or_else(|e| panic!("CudaStorage::clone: {e}"))
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
