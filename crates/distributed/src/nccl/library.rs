//! Finding the NCCL library at run time, its version, its unique ids and its errors.

use cudarc::nccl::{result, sys};

use crate::{Backend, DistError, Result};

/// True when the NCCL library can be loaded (never panics; false without it).
#[must_use]
pub fn is_nccl_available() -> bool {
    // SAFETY: only tries to dlopen the library under its candidate names.
    unsafe { sys::is_culib_present() }
}

/// The NCCL library's version (e.g. 22707 for 2.27.7).
pub fn nccl_version() -> Result<i32> {
    require_library()?;
    result::get_nccl_version().map_err(nccl_error("ncclGetVersion"))
}

pub(super) fn require_library() -> Result<()> {
    if is_nccl_available() {
        Ok(())
    } else {
        Err(DistError::BackendUnavailable {
            backend: Backend::Nccl,
            reason: "libnccl.so was not found (install nvidia-nccl-cu13==2.27.7, add a libnccl.so \
                     symlink next to its libnccl.so.2 and put that folder on LD_LIBRARY_PATH)"
                .into(),
        })
    }
}

pub(super) fn nccl_error(op: &'static str) -> impl Fn(result::NcclError) -> DistError {
    move |e| DistError::Nccl {
        op,
        message: format!("{:?}", e.0),
    }
}

/// A new NCCL unique id: rank 0 makes it, the rendezvous hands it to the others.
pub fn unique_id() -> Result<[u8; 128]> {
    require_library()?;
    let id = result::get_uniqueid().map_err(nccl_error("ncclGetUniqueId"))?;
    Ok(id.internal.map(|c| c as u8))
}
