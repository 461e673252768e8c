//! The NCCL backend (feature `nccl`): one process per GPU, launched torchrun-style.
//!
//! ```text
//! RANK=r WORLD_SIZE=n LOCAL_RANK=g MASTER_ADDR=host MASTER_PORT=29500 \
//!     target/release/examples/ddp_train --backend nccl ...
//! ```
//!
//! Rank 0 creates NCCL's 128-byte unique id and hands it to the others through the
//! [`rendezvous`](crate::rendezvous) store on `MASTER_ADDR:MASTER_PORT` (torchrun's
//! agent store, or else ditto's own on rank 0; the id travels sealed with the job
//! token), where each rank's progress stays published for naming a rank that stops
//! ([`ProgressBoard`]); every rank then joins the communicator
//! on GPU `LOCAL_RANK`. Collectives run
//! on the device's default stream, the one ditto's kernels use, so they are ordered
//! after the kernels that produced their inputs and before those that read their
//! outputs.
//!
//! NCCL's all-reduce picks ring, tree or NVLS, channels and chunking itself: its sums
//! are reproducible only for a fixed world size and topology. The invariant mode of
//! [`crate::ddp`] only moves data through NCCL (`all_to_all`, `all_gather`).
//!
//! Every collective is enqueued on the stream and its call returns, as PyTorch's do:
//! the CPU goes on queueing work while NCCL runs. Every collective is also watched
//! ([`watchdog`]): CUDA events recorded around it tell a watchdog thread when the
//! stream reached it and when it completed, and one that does not complete within the
//! collective timeout (`DITTO_COLLECTIVE_TIMEOUT_S`, [`NcclGroup::with_timeout`]) of
//! starting aborts the communicator. The next call on the group then ends with
//! [`DistError::CollectiveTimeout`] (so does
//! [`ProcessGroup::check_completed`](crate::ProcessGroup::check_completed), which a
//! trainer calls after reading its loss), so the output of an aborted collective is
//! never used unreported.
//!
//! The library is found at run time (cudarc's dynamic loading): ditto pins
//! `nvidia-nccl-cu13==2.27.7` (built against CUDA 13.0 like the other pins), whose
//! `nvidia/nccl/lib/libnccl.so.2` needs a `libnccl.so` symlink for cudarc to find it.
//! Without it, [`is_nccl_available`] is false and [`NcclGroup`] returns
//! [`DistError::BackendUnavailable`]; nothing panics.

mod grouped;
mod library;
mod watchdog;

use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};
use cudarc::nccl::{result, sys};
use tensor_core::cuda::CudaStorage;
use tensor_core::{DType, Device, Storage, Tensor};

use crate::engine::{AllGather, AllToAll, Broadcast, Engine, GroupInfo, Sum, SumDtype};
use crate::group::offsets;
use launch::rendezvous::{JobToken, Rendezvous};
use launch::{LaunchEnv, LaunchError, DEFAULT_TIMEOUT};

use crate::ProgressBoard;
use crate::{Backend, DistError, Result};
use grouped::grouped_exchange;
use library::{
    in_progress, is_in_progress, joined, nccl_error, nonblocking_config, require_library,
    still_in_progress, IN_PROGRESS_POLL,
};
pub use library::{is_nccl_available, nccl_version, unique_id};
use watchdog::{CommHandle, Watchdog};

/// This process's rank in a group of GPUs joined over NCCL. Dropping it aborts the
/// communicator (never waits on peers, which may be gone).
pub struct NcclGroup {
    /// The number of the next collective; held for the whole of each collective, since
    /// calls on one communicator must not overlap.
    sequence: Mutex<u64>,
    /// Owns the communicator and aborts it when a collective overruns.
    watchdog: Watchdog,
    stream: Arc<CudaStream>,
    /// Its device is `Device::Cuda(ordinal)`.
    info: GroupInfo,
    ordinal: usize,
    /// Each rank's progress in the job's store, to name the rank(s) a timed-out
    /// collective waited for (set by [`NcclGroup::from_env`]).
    progress: Option<ProgressBoard>,
}

impl std::fmt::Debug for NcclGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclGroup")
            .field("rank", &self.info.rank)
            .field("world_size", &self.info.world_size)
            .field("device", &self.info.device)
            .finish()
    }
}

impl NcclGroup {
    /// Joins the job described by torchrun's variables ([`LaunchEnv::from_env`]) on GPU
    /// `LOCAL_RANK`, exchanging the id through the rendezvous store within `timeout`
    /// ([`Rendezvous`]: torchrun's agent store, or else ditto's own on rank 0).
    /// Every variable is checked first, `LOCAL_RANK` against the machine's GPUs too.
    /// Rank 0's own store listens on `DITTO_RENDEZVOUS_BIND` (default `MASTER_ADDR`) and
    /// rank 0 prints the connections it refused to stderr; collectives are bounded by
    /// `DITTO_COLLECTIVE_TIMEOUT_S` (default [`DEFAULT_TIMEOUT`]).
    pub fn from_env(timeout: Duration) -> Result<NcclGroup> {
        let env = LaunchEnv::from_env()?;
        let token = JobToken::from_env(&env)?;
        require_library()?;
        env.check_local_rank(tensor_core::cuda::device_count())?;
        let mut rendezvous = Rendezvous::join(&env, &token, timeout)?;
        let made = if env.rank == 0 {
            Some(unique_id()?)
        } else {
            None
        };
        let id = rendezvous.exchange(made.as_ref().map(|id| &id[..]))?;
        for refusal in rendezvous.take_refusals() {
            eprintln!("rendezvous on {}: {refusal}", env.master());
        }
        let id: [u8; 128] = id
            .try_into()
            .map_err(|b: Vec<u8>| LaunchError::Rendezvous {
                address: env.master(),
                message: format!("received {} bytes, an NCCL id has 128", b.len()),
            })?;
        let progress = ProgressBoard::start(rendezvous, env.rank, env.world_size)?;
        Ok(
            NcclGroup::new(env.rank, env.world_size, env.local_rank, &id)?
                .with_timeout(env.collective_timeout)
                .with_progress(progress),
        )
    }

    /// Sets how long one collective may take before the watchdog aborts the
    /// communicator (default [`DEFAULT_TIMEOUT`]).
    #[must_use]
    pub fn with_timeout(self, timeout: Duration) -> Self {
        self.watchdog.set_timeout(timeout);
        self
    }

    /// Publishes this rank's progress through its collectives on `board`, so that a
    /// collective that times out names the rank(s) that did not arrive
    /// ([`DistError::CollectiveTimeoutNamed`]).
    #[must_use]
    pub fn with_progress(mut self, board: ProgressBoard) -> Self {
        self.progress = Some(board);
        self
    }

    /// Joins rank `rank` of `world_size` on CUDA device `ordinal`, with the id rank 0
    /// made by [`unique_id`]. Blocks until every rank has joined (NCCL's own bootstrap).
    pub fn new(
        rank: usize,
        world_size: usize,
        ordinal: usize,
        id: &[u8; 128],
    ) -> Result<NcclGroup> {
        const OP: &str = "NcclGroup::new";
        if world_size == 0 || rank >= world_size || i32::try_from(world_size).is_err() {
            return Err(DistError::invalid(
                OP,
                format!("rank {rank} is not in 0..{world_size}"),
            ));
        }
        require_library()?;
        let stream =
            tensor_core::cuda::default_stream(ordinal).map_err(tensor_core::TensorError::from)?;
        let unique = sys::ncclUniqueId {
            internal: id.map(|b| b as std::ffi::c_char),
        };
        let mut comm = std::mem::MaybeUninit::uninit();
        let mut config = nonblocking_config();
        // SAFETY: `comm` is written by NCCL on success (or in progress) and read only
        // then; the device's primary context is current on this thread (default_stream
        // bound it); `config` outlives the call.
        let comm = unsafe {
            stream
                .context()
                .bind_to_thread()
                .map_err(|e| DistError::Nccl {
                    op: OP,
                    message: e.to_string(),
                })?;
            let code = sys::ncclCommInitRankConfig(
                comm.as_mut_ptr(),
                world_size as i32,
                unique,
                rank as i32,
                &mut config,
            );
            if !matches!(
                code,
                sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress
            ) {
                return Err(nccl_error("ncclCommInitRankConfig")(result::NcclError(
                    code,
                )));
            }
            CommHandle(comm.assume_init())
        };
        joined(comm, DEFAULT_TIMEOUT)?;
        let comm = comm.0;
        Ok(NcclGroup {
            sequence: Mutex::new(0),
            watchdog: Watchdog::start(
                CommHandle(comm),
                Arc::clone(stream.context()),
                DEFAULT_TIMEOUT,
            )?,
            stream,
            info: GroupInfo {
                rank,
                world_size,
                backend: Backend::Nccl,
                device: Device::Cuda(ordinal),
            },
            ordinal,
            progress: None,
        })
    }

    fn sequence(&self) -> MutexGuard<'_, u64> {
        self.sequence.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs collective `op` under the watchdog: `body` enqueues it on the communicator
    /// (see [`watchdog`] for how its completion and timeout are tracked). Returns once
    /// it is enqueued, or with the timeout of an earlier collective.
    fn watched(&self, op: &'static str, body: impl FnOnce(CommHandle) -> Result<()>) -> Result<()> {
        let mut next = self.sequence();
        let sequence = *next;
        *next += 1;
        let result = self
            .watchdog
            .enter(op, sequence, &self.stream)
            .and_then(|comm| {
                if let Some(board) = &self.progress {
                    board.entered(sequence);
                }
                let issued = self.settled(op, sequence, comm, body(comm));
                self.watchdog.leave(sequence, &self.stream, issued)
            });
        self.reported(sequence, result)
    }

    /// `issued`, once the communicator finished the call: a non-blocking communicator
    /// answers `ncclInProgress` for a call it could not finish at once (NCCL >= 2.22
    /// connects to the peers inside the first collective, and a dead peer makes that
    /// connection last for ever). This thread polls `ncclCommGetAsyncError` until the
    /// call is done or the watchdog finds the collective overdue; then
    /// [`Watchdog::leave`] aborts the communicator and reports the timeout. A blocking
    /// communicator would keep this thread inside the call, where no abort may reach it.
    fn settled(
        &self,
        op: &'static str,
        sequence: u64,
        comm: CommHandle,
        issued: Result<()>,
    ) -> Result<()> {
        match issued {
            Err(e) if is_in_progress(&e) => loop {
                if !still_in_progress(comm, op)? {
                    return Ok(());
                }
                if self.watchdog.is_overdue(sequence) {
                    return Err(DistError::Nccl {
                        op,
                        message: "still in progress at the collective timeout".into(),
                    });
                }
                std::thread::sleep(IN_PROGRESS_POLL);
            },
            other => other,
        }
    }

    /// `result` of collective `sequence`, a timeout naming the rank(s) that did not
    /// arrive when the progress board knows them.
    fn reported<T>(&self, sequence: u64, result: Result<T>) -> Result<T> {
        match &self.progress {
            Some(board) => board.finished(sequence, result),
            None => result,
        }
    }

    /// `error` of an earlier collective, a timeout naming the rank(s) that did not
    /// arrive when the progress board knows them (the error carries its own sequence).
    fn named<T>(&self, error: DistError) -> Result<T> {
        match &self.progress {
            Some(board) => board.finished(0, Err(error)),
            None => Err(error),
        }
    }

    /// A device buffer of `len` elements for a collective's output, which the
    /// collective writes completely (not zeroed first: a memset per collective).
    fn buffer(&self, dtype: DType, len: usize) -> Result<CudaStorage> {
        Ok(CudaStorage::alloc_uninit(self.ordinal, dtype, len)?)
    }
}

/// The device buffer of a (checked: contiguous, on this device) tensor.
fn storage(t: &Tensor) -> &CudaStorage {
    match t.storage() {
        Storage::Cuda(s) => s,
        _ => unreachable!("the engine's checks put it on this rank's GPU"),
    }
}

/// NCCL's datatype for summing `dtype`.
fn reduce_type(dtype: SumDtype) -> sys::ncclDataType_t {
    match dtype {
        SumDtype::F32 => sys::ncclDataType_t::ncclFloat32,
        SumDtype::F64 => sys::ncclDataType_t::ncclFloat64,
        SumDtype::I64 => sys::ncclDataType_t::ncclInt64,
    }
}

/// NCCL's datatype for the collectives that only move data: they move bytes.
const BYTES: sys::ncclDataType_t = sys::ncclDataType_t::ncclUint8;

impl NcclGroup {
    /// `*tensor` replaced by a new buffer filled by collective `op`, which
    /// `fill(comm, send, recv, stream)` issues (watched: see [`Self::watched`]).
    fn out_of_place(
        &self,
        op: &'static str,
        input: &Tensor,
        out_len: usize,
        dims: &[usize],
        fill: impl FnOnce(CommHandle, u64, u64, *mut c_void) -> Result<()>,
    ) -> Result<Tensor> {
        let mut out = self.buffer(input.dtype(), out_len)?;
        let src = storage(input);
        let offset = (input.storage_offset() * input.dtype().size_in_bytes()) as u64;
        self.watched(op, |comm| {
            let (send, _read) = src.bytes().device_ptr(&self.stream);
            let (recv, _write) = out.bytes_mut().device_ptr_mut(&self.stream);
            fill(
                comm,
                send + offset,
                recv,
                self.stream.cu_stream() as *mut c_void,
            )
        })?;
        Ok(Tensor::from_storage(Storage::Cuda(out), dims)?)
    }

    /// `all_reduce` (sum) reported as collective `op` (the barrier is one).
    fn sum_as(&self, op: &'static str, tensor: &mut Tensor, dtype: SumDtype) -> Result<()> {
        let n = tensor.elem_count();
        *tensor = self.out_of_place(op, tensor, n, tensor.dims(), |comm, send, recv, stream| {
            // SAFETY: both buffers hold n elements of dtype on this rank's device.
            unsafe {
                result::all_reduce(
                    send as *const c_void,
                    recv as *mut c_void,
                    n,
                    reduce_type(dtype),
                    sys::ncclRedOp_t::ncclSum,
                    comm.0,
                    stream as _,
                )
            }
            .map_err(nccl_error("ncclAllReduce"))
            .and_then(in_progress("ncclAllReduce"))
        })?;
        Ok(())
    }
}

impl Engine for NcclGroup {
    fn info(&self) -> GroupInfo {
        self.info
    }

    fn run_sum(&self, args: Sum<'_>) -> Result<()> {
        self.sum_as("all_reduce", args.tensor, args.dtype)
    }

    fn run_broadcast(&self, args: Broadcast<'_>) -> Result<()> {
        let Broadcast { tensor, src } = args;
        let bytes = tensor.elem_count() * tensor.dtype().size_in_bytes();
        *tensor = self.out_of_place(
            "broadcast",
            tensor,
            tensor.elem_count(),
            tensor.dims(),
            |comm, send, recv, stream| {
                // SAFETY: both buffers hold `bytes` bytes on this rank's device.
                unsafe {
                    result::broadcast(
                        send as *const c_void,
                        recv as *mut c_void,
                        bytes,
                        BYTES,
                        src as i32,
                        comm.0,
                        stream as _,
                    )
                }
                .map_err(nccl_error("ncclBroadcast"))
                .and_then(in_progress("ncclBroadcast"))
            },
        )?;
        Ok(())
    }

    fn run_all_gather(&self, args: AllGather<'_>) -> Result<()> {
        let (output, input, counts) = (args.output, args.input, args.counts);
        let (rank, world) = (self.info.rank, self.info.world_size);
        let size = input.dtype().size_in_bytes();
        let even = counts.iter().all(|&c| c == counts[0]);
        let starts = offsets(counts);
        *output = self.out_of_place(
            "all_gather",
            input,
            output.elem_count(),
            output.dims(),
            |comm, send, recv, stream| {
                if even {
                    // SAFETY: recv holds world * counts[0] elements, send counts[0].
                    return unsafe {
                        result::all_gather(
                            send as *const c_void,
                            recv as *mut c_void,
                            counts[0] * size,
                            BYTES,
                            comm.0,
                            stream as _,
                        )
                    }
                    .map_err(nccl_error("ncclAllGather"))
                    .and_then(in_progress("ncclAllGather"));
                }
                let sends = vec![counts[rank]; world];
                grouped_exchange(
                    comm,
                    stream,
                    send,
                    &sends,
                    &vec![0; world],
                    recv,
                    counts,
                    &starts,
                    size,
                )
            },
        )?;
        Ok(())
    }

    fn run_all_to_all(&self, args: AllToAll<'_>) -> Result<()> {
        let (output, input) = (args.output, args.input);
        let (input_counts, output_counts) = (args.input_counts, args.output_counts);
        let size = input.dtype().size_in_bytes();
        let (send_starts, recv_starts) = (offsets(input_counts), offsets(output_counts));
        *output = self.out_of_place(
            "all_to_all",
            input,
            output.elem_count(),
            output.dims(),
            |comm, send, recv, stream| {
                grouped_exchange(
                    comm,
                    stream,
                    send,
                    input_counts,
                    &send_starts,
                    recv,
                    output_counts,
                    &recv_starts,
                    size,
                )
            },
        )?;
        Ok(())
    }

    fn run_barrier(&self) -> Result<()> {
        // A one-element sum, waited for: a barrier returns once every rank called it.
        let mut one = Tensor::zeros(&[1], DType::F32, self.info.device)?;
        self.sum_as("barrier", &mut one, SumDtype::F32)?;
        self.watchdog.wait_all().or_else(|e| self.named(e))
    }

    fn run_check_completed(&self) -> Result<()> {
        self.watchdog.check().or_else(|e| self.named(e))
    }
}
