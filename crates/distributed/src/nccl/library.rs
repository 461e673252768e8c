//! Finding the NCCL library at run time, its version, its unique ids and its errors.

use std::time::{Duration, Instant};

use cudarc::nccl::{result, sys};

use super::watchdog::CommHandle;
use crate::{Backend, DistError, Result};

/// How often a call in progress is polled (`ncclCommGetAsyncError` is a flag read).
pub(super) const IN_PROGRESS_POLL: Duration = Duration::from_millis(1);

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

/// `NCCL_CONFIG_INITIALIZER` with `blocking = 0`: every call may return
/// `ncclInProgress` instead of blocking, so no thread is ever stuck inside NCCL where
/// the watchdog's abort cannot reach it ([`NcclGroup::new`](super::NcclGroup::new)).
pub(super) fn nonblocking_config() -> sys::ncclConfig_t {
    // NCCL_CONFIG_UNDEF_INT / _PTR: NCCL's default for the field.
    const UNDEF: std::ffi::c_int = std::ffi::c_int::MIN;
    sys::ncclConfig_t {
        size: std::mem::size_of::<sys::ncclConfig_t>(),
        magic: 0xcafe_beef,
        // NCCL_VERSION(2, 27, 7), the pinned library.
        version: 22707,
        blocking: 0,
        cgaClusterSize: UNDEF,
        minCTAs: UNDEF,
        maxCTAs: UNDEF,
        netName: std::ptr::null(),
        splitShare: UNDEF,
        trafficClass: UNDEF,
        commName: std::ptr::null(),
        collnetEnable: UNDEF,
        CTAPolicy: UNDEF,
        shrinkShare: UNDEF,
        nvlsCTAs: UNDEF,
    }
}

/// What a non-blocking communicator's call that has not finished reports.
const IN_PROGRESS: &str = "ncclInProgress";

/// A call's status as ditto's result: `Ok` when done, the [`is_in_progress`] error when a
/// non-blocking communicator has not finished it (cudarc reports that as a success).
pub(super) fn in_progress(op: &'static str) -> impl Fn(result::NcclStatus) -> Result<()> {
    move |status| match status {
        result::NcclStatus::InProgress => Err(DistError::Nccl {
            op,
            message: IN_PROGRESS.into(),
        }),
        _ => Ok(()),
    }
}

/// Whether `error` is [`in_progress`]'s.
pub(super) fn is_in_progress(error: &DistError) -> bool {
    matches!(error, DistError::Nccl { message, .. } if message == IN_PROGRESS)
}

/// Whether a call on the communicator is still in progress (`ncclCommGetAsyncError`
/// says `ncclInProgress`); NCCL's error once one failed.
pub(super) fn still_in_progress(comm: CommHandle, op: &'static str) -> Result<bool> {
    let mut state = sys::ncclResult_t::ncclSuccess;
    // SAFETY: `comm` is live (the watchdog aborts it only from this thread's side).
    let code = unsafe { sys::ncclCommGetAsyncError(comm.0, &mut state) };
    if code != sys::ncclResult_t::ncclSuccess {
        return Err(nccl_error("ncclCommGetAsyncError")(result::NcclError(code)));
    }
    match state {
        sys::ncclResult_t::ncclSuccess => Ok(false),
        sys::ncclResult_t::ncclInProgress => Ok(true),
        other => Err(nccl_error(op)(result::NcclError(other))),
    }
}

/// Waits until a non-blocking communicator finished joining, at most `limit`; aborts
/// it when it did not.
pub(super) fn joined(comm: CommHandle, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        if !still_in_progress(comm, "ncclCommInitRankConfig")? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            // SAFETY: nothing else holds the communicator yet.
            let _ = unsafe { result::comm_abort(comm.0) };
            return Err(DistError::Nccl {
                op: "ncclCommInitRankConfig",
                message: format!("the ranks did not join within {limit:?}"),
            });
        }
        std::thread::sleep(IN_PROGRESS_POLL);
    }
}
