//! The all-to-all NCCL has no single call for: sends and receives in one group.

use std::ffi::c_void;

use cudarc::nccl::result;

use super::library::{in_progress, nccl_error};
use super::watchdog::CommHandle;
use super::BYTES;
use crate::Result;

/// Every rank sends `send_counts[q]` elements from `send + send_starts[q]` to rank `q`
/// and receives `recv_counts[q]` into `recv + recv_starts[q]`, in one NCCL group (the
/// all-to-all NCCL has no single call for). Runs of zero elements are skipped on both
/// sides alike, since the counts pair up. The calling thread is inside NCCL for the
/// whole group (the watchdog does not abort meanwhile).
#[allow(clippy::too_many_arguments)]
pub(super) fn grouped_exchange(
    comm: CommHandle,
    stream: *mut c_void,
    send: u64,
    send_counts: &[usize],
    send_starts: &[usize],
    recv: u64,
    recv_counts: &[usize],
    recv_starts: &[usize],
    size: usize,
) -> Result<()> {
    result::group_start().map_err(nccl_error("ncclGroupStart"))?;
    let recorded = {
        let mut first_error = Ok(());
        for peer in 0..send_counts.len() {
            if send_counts[peer] > 0 {
                let from = (send + (send_starts[peer] * size) as u64) as *const c_void;
                // SAFETY: the run lies inside the send buffer (checked counts).
                let r = unsafe {
                    result::send(
                        from,
                        send_counts[peer] * size,
                        BYTES,
                        peer as i32,
                        comm.0,
                        stream as _,
                    )
                };
                first_error = first_error.and(
                    r.map_err(nccl_error("ncclSend"))
                        .and_then(in_progress("ncclSend")),
                );
            }
            if recv_counts[peer] > 0 {
                let into = (recv + (recv_starts[peer] * size) as u64) as *mut c_void;
                // SAFETY: the run lies inside the receive buffer (checked counts).
                let r = unsafe {
                    result::recv(
                        into,
                        recv_counts[peer] * size,
                        BYTES,
                        peer as i32,
                        comm.0,
                        stream as _,
                    )
                };
                first_error = first_error.and(
                    r.map_err(nccl_error("ncclRecv"))
                        .and_then(in_progress("ncclRecv")),
                );
            }
        }
        first_error
    };
    // The group is always closed, even after a failed call inside it.
    let end = result::group_end()
        .map_err(nccl_error("ncclGroupEnd"))
        .and_then(in_progress("ncclGroupEnd"));
    recorded.and(end)
}
