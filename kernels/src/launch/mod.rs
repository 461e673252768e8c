//! Launchers: queue one of ditto's kernels on a device buffer, given plain values.
//!
//! Each launcher takes the output buffer (its length is `n`, its dtype picks the
//! kernel), the op's reserved `(seed, offset)` and its parameters. Reserving the offset
//! is the generator's job (rng-gen, using [`increment_for`](crate::increment_for)); a
//! launcher never touches generator state. Work is queued on the buffer's stream
//! (the device's default stream), so it is ordered after earlier ditto work without
//! extra synchronisation; the call returns once the kernel is queued.

mod dropout;
mod fill;

pub use dropout::{dropout, dropout_backward, KeepSource};
pub use fill::{bernoulli, bits, normal, randint, uniform};

use cudarc::driver::{DriverError, LaunchConfig};
use tensor_core::cuda::CudaStorage;
use tensor_core::{DType, Device, TensorError};

use crate::error::{KernelError, Result};
use crate::grid::Launch;
use crate::module_cache;

/// The kernel for `op` on `dtype` (`ditto_<op>_<suffix>_kernel`), or `UnsupportedDType`.
fn kernel_name(
    op: &'static str,
    dtype: DType,
    supported: &'static [DType],
    supported_text: &'static str,
) -> Result<String> {
    if !supported.contains(&dtype) {
        return Err(TensorError::UnsupportedDType {
            op,
            dtype,
            supported: supported_text,
        }
        .into());
    }
    let suffix = match dtype {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::I64 => "i64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::U32 => "u32",
        // Bool is one byte, 0 or 1: the u8 kernel writes exactly that.
        DType::U8 | DType::Bool => "u8",
    };
    Ok(format!("ditto_{op}_{suffix}_kernel"))
}

/// The cudarc launch configuration for `work_items` items of kernel work.
fn launch_config(ordinal: usize, work_items: u64, launch: Launch) -> Result<LaunchConfig> {
    let sm_count = module_cache::sm_count(ordinal)?;
    let grid = launch
        .grid(work_items, sm_count)
        .ok_or_else(|| KernelError::InvalidArgument {
            op: "launch",
            message: format!("{launch:?} is outside CUDA's limits (1..=1024 threads, >= 1 block)"),
        })?;
    Ok(LaunchConfig {
        grid_dim: (grid.blocks, 1, 1),
        block_dim: (grid.threads, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// Maps a driver error from launching `kernel` on `ordinal`.
fn launch_failed(ordinal: usize, kernel: &str) -> impl FnOnce(DriverError) -> KernelError + '_ {
    move |e| KernelError::Launch {
        ordinal,
        kernel: kernel.to_string(),
        message: e.to_string(),
    }
}

/// Errors unless `other` lives on the same device as `first`.
fn same_device(op: &'static str, first: &CudaStorage, other: &CudaStorage) -> Result<()> {
    if first.ordinal() == other.ordinal() {
        Ok(())
    } else {
        Err(TensorError::DeviceMismatch {
            op,
            lhs: Device::Cuda(first.ordinal()),
            rhs: Device::Cuda(other.ordinal()),
        }
        .into())
    }
}

/// Errors unless `storage` holds `expected` elements.
fn check_len(op: &'static str, what: &str, storage: &CudaStorage, expected: u64) -> Result<()> {
    if storage.len() as u64 == expected {
        Ok(())
    } else {
        Err(KernelError::InvalidArgument {
            op,
            message: format!("{what} has {} elements, expected {expected}", storage.len()),
        })
    }
}
