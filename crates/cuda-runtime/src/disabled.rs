//! Stand-ins for the CUDA entry points when ditto is built without the `cuda` feature,
//! so callers can probe for a GPU without `cfg` attributes of their own.

use crate::{CudaError, Result};

/// The error every CUDA request gets in a build without the `cuda` feature.
pub fn disabled(ordinal: usize) -> CudaError {
    CudaError::Unavailable {
        ordinal,
        reason: "ditto was built without the `cuda` feature".into(),
    }
}

/// Always 0: this build has no CUDA support.
#[must_use]
pub fn device_count() -> usize {
    0
}

/// Always false: this build has no CUDA support.
#[must_use]
pub fn is_available() -> bool {
    false
}

/// Always `CudaError::Unavailable`: this build has no CUDA support.
pub fn synchronize(ordinal: usize) -> Result<()> {
    Err(disabled(ordinal))
}

/// Always `CudaError::Unavailable`: this build has no CUDA support.
pub fn get_device_name(ordinal: usize) -> Result<String> {
    Err(disabled(ordinal))
}
