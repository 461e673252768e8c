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
    // Where peer `q`'s run of one side starts (in bytes) and how many bytes it has.
    let run = |base: u64, counts: &[usize], starts: &[usize], q: usize| {
        (base + (starts[q] * size) as u64, counts[q] * size)
    };
    let recorded = {
        let mut first_error = Ok(());
        let check = |name, r: std::result::Result<result::NcclStatus, result::NcclError>| {
            r.map_err(nccl_error(name)).and_then(in_progress(name))
        };
        for peer in 0..send_counts.len() {
            let (from, bytes) = run(send, send_counts, send_starts, peer);
            if bytes > 0 {
                let from = from as *const c_void;
                // SAFETY: the run lies inside the send buffer (checked counts).
                let r =
                    unsafe { result::send(from, bytes, BYTES, peer as i32, comm.0, stream as _) };
                first_error = first_error.and(check("ncclSend", r));
            }
            let (into, bytes) = run(recv, recv_counts, recv_starts, peer);
            if bytes > 0 {
                let into = into as *mut c_void;
                // SAFETY: the run lies inside the receive buffer (checked counts).
                let r =
                    unsafe { result::recv(into, bytes, BYTES, peer as i32, comm.0, stream as _) };
                first_error = first_error.and(check("ncclRecv", r));
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
