//! The CUDA entry points in a build without the `cuda` feature: the runtime's probes
//! that answer "no GPU", so callers can ask without `cfg` attributes of their own.

pub use cuda_runtime::{device_count, get_device_name, is_available, synchronize};

/// The error every CUDA request gets in a build without the `cuda` feature.
pub(crate) fn disabled(ordinal: usize) -> crate::TensorError {
    cuda_runtime::disabled(ordinal).into()
}
