//! [`PackedMask`]: a dropout keep-mask packed one bit per element, kept where the forward
//! pass made it.
//!
//! Why not always on the host: on CUDA, copying the mask to the host after the forward
//! kernel means a device-to-host copy and a wait for the device inside every training
//! step (on an H100, 2.15 ms of waiting against 0.20 ms of kernels for the demo), and
//! backward then uploads it again. A mask made on a device stays there and backward's
//! kernel reads it in place; the host sees it only when someone asks ([`PackedMask::words`]).

#[cfg(feature = "cuda")]
use std::sync::Arc;

use crate::RngError;

/// Bit `i % 32` of word `i / 32` is set iff element `i` was kept; bits past the last
/// element are 0 (the layout of `kernels::mask`, shared by the CPU and the kernels).
#[derive(Clone, Debug)]
pub enum PackedMask {
    /// Words on the host (a CPU forward, or rows drawn for data parallelism).
    Host(Vec<u32>),
    /// Words on the forward's CUDA device (a u32 buffer), which backward reads there.
    #[cfg(feature = "cuda")]
    Device(Arc<tensor_core::cuda::CudaStorage>),
}

impl PackedMask {
    /// Number of u32 words.
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            PackedMask::Host(words) => words.len(),
            #[cfg(feature = "cuda")]
            PackedMask::Device(storage) => storage.len(),
        }
    }

    /// True when the mask has no words (no elements).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The words on the host: a copy, downloaded (waiting for the device) for a device
    /// mask.
    pub fn words(&self) -> Result<Vec<u32>, RngError> {
        match self {
            PackedMask::Host(words) => Ok(words.clone()),
            #[cfg(feature = "cuda")]
            PackedMask::Device(storage) => match storage.to_cpu()? {
                tensor_core::CpuStorage::U32(words) => Ok(words),
                _ => Err(RngError::InconsistentState {
                    reason: "a dropout mask on the device is not a u32 buffer",
                }),
            },
        }
    }
}

/// Two masks are equal when their bits are, wherever they live: comparing with a device
/// mask downloads it (and waits for the device); a mask that cannot be read equals
/// nothing.
impl PartialEq for PackedMask {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (PackedMask::Host(a), PackedMask::Host(b)) => a == b,
            #[cfg(feature = "cuda")]
            (PackedMask::Device(a), PackedMask::Device(b)) if Arc::ptr_eq(a, b) => true,
            #[allow(unreachable_patterns)]
            _ => match (self.words(), other.words()) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            },
        }
    }
}

impl From<Vec<u32>> for PackedMask {
    fn from(words: Vec<u32>) -> Self {
        PackedMask::Host(words)
    }
}
