//! The buffers behind tensors.

use half::{bf16, f16};

use crate::{DType, Device, Result};

/// A typed host buffer. One variant per [`DType`], so a buffer always knows its type and
/// `bytemuck` can view the numeric variants as bytes without copying.
#[derive(Clone, Debug, PartialEq)]
pub enum CpuStorage {
    /// f32 elements.
    F32(Vec<f32>),
    /// f64 elements.
    F64(Vec<f64>),
    /// f16 elements.
    F16(Vec<f16>),
    /// bf16 elements.
    BF16(Vec<bf16>),
    /// i64 elements.
    I64(Vec<i64>),
    /// u32 elements.
    U32(Vec<u32>),
    /// u8 elements.
    U8(Vec<u8>),
    /// bool elements.
    Bool(Vec<bool>),
}

/// Applies `$body` to the typed vector inside a [`CpuStorage`], whatever its type.
#[macro_export]
#[doc(hidden)]
macro_rules! with_cpu_storage {
    ($storage:expr, $v:ident => $body:expr) => {
        match $storage {
            $crate::CpuStorage::F32($v) => $body,
            $crate::CpuStorage::F64($v) => $body,
            $crate::CpuStorage::F16($v) => $body,
            $crate::CpuStorage::BF16($v) => $body,
            $crate::CpuStorage::I64($v) => $body,
            $crate::CpuStorage::U32($v) => $body,
            $crate::CpuStorage::U8($v) => $body,
            $crate::CpuStorage::Bool($v) => $body,
        }
    };
}

impl CpuStorage {
    /// The element type held.
    #[must_use]
    pub fn dtype(&self) -> DType {
        match self {
            CpuStorage::F32(_) => DType::F32,
            CpuStorage::F64(_) => DType::F64,
            CpuStorage::F16(_) => DType::F16,
            CpuStorage::BF16(_) => DType::BF16,
            CpuStorage::I64(_) => DType::I64,
            CpuStorage::U32(_) => DType::U32,
            CpuStorage::U8(_) => DType::U8,
            CpuStorage::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements held.
    #[must_use]
    pub fn len(&self) -> usize {
        with_cpu_storage!(self, v => v.len())
    }

    /// True when no elements are held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where a tensor's elements live: host memory, or (with the `cuda` feature) a device
/// buffer.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Storage {
    /// Host memory.
    Cpu(CpuStorage),
    /// Memory on a CUDA device.
    #[cfg(feature = "cuda")]
    Cuda(crate::cuda::CudaStorage),
}

impl Storage {
    /// The device holding the buffer.
    #[must_use]
    pub fn device(&self) -> Device {
        match self {
            Storage::Cpu(_) => Device::Cpu,
            #[cfg(feature = "cuda")]
            Storage::Cuda(s) => Device::Cuda(s.ordinal()),
        }
    }

    /// The element type held.
    #[must_use]
    pub fn dtype(&self) -> DType {
        match self {
            Storage::Cpu(s) => s.dtype(),
            #[cfg(feature = "cuda")]
            Storage::Cuda(s) => s.dtype(),
        }
    }

    /// Number of elements held.
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            Storage::Cpu(s) => s.len(),
            #[cfg(feature = "cuda")]
            Storage::Cuda(s) => s.len(),
        }
    }

    /// True when no elements are held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A deep copy that reports failure (a device allocation can fail) instead of
    /// panicking like `Clone` would.
    pub fn try_clone(&self) -> Result<Storage> {
        match self {
            Storage::Cpu(s) => Ok(Storage::Cpu(s.clone())),
            #[cfg(feature = "cuda")]
            Storage::Cuda(s) => Ok(Storage::Cuda(s.try_clone()?)),
        }
    }
}
