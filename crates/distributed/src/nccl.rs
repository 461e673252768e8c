//! The NCCL backend (feature `nccl`): one process per GPU, launched torchrun-style.
//!
//! ```text
//! RANK=r WORLD_SIZE=n LOCAL_RANK=g MASTER_ADDR=host MASTER_PORT=29500 \
//!     target/release/examples/ddp_train --backend nccl ...
//! ```
//!
//! Rank 0 creates NCCL's 128-byte unique id and hands it to the others through the
//! [`rendezvous`](crate::rendezvous) store on `MASTER_ADDR:MASTER_PORT` (bootstrap
//! only); every rank then joins the communicator on GPU `LOCAL_RANK`. Collectives run
//! on the device's default stream, the one ditto's kernels use, so they are ordered
//! after the kernels that produced their inputs and before those that read their
//! outputs.
//!
//! NCCL's all-reduce picks ring, tree or NVLS, channels and chunking itself: its sums
//! are reproducible only for a fixed world size and topology. The invariant mode of
//! [`crate::ddp`] only moves data through NCCL (`all_to_all`, `all_gather`).
//!
//! The library is found at run time (cudarc's dynamic loading): ditto pins
//! `nvidia-nccl-cu13==2.27.7` (built against CUDA 13.0 like the other pins), whose
//! `nvidia/nccl/lib/libnccl.so.2` needs a `libnccl.so` symlink for cudarc to find it.
//! Without it, [`is_nccl_available`] is false and [`NcclGroup`] returns
//! [`DistError::BackendUnavailable`]; nothing panics.

use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};
use cudarc::nccl::{result, sys};
use tensor_core::cuda::CudaStorage;
use tensor_core::{DType, Device, Storage, Tensor};

use crate::group::{check, offsets};
use crate::rendezvous::{fetch, RendezvousServer};
use crate::{Backend, DistError, LaunchEnv, ProcessGroup, ReduceOp, Result};

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

fn require_library() -> Result<()> {
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

fn nccl_error(op: &'static str) -> impl Fn(result::NcclError) -> DistError {
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

/// The communicator handle; aborted (never waited on) when dropped.
struct Comm(sys::ncclComm_t);

// SAFETY: an NCCL communicator may be used from any thread as long as calls on it do
// not overlap; `NcclGroup` only touches it under its mutex.
unsafe impl Send for Comm {}

impl Drop for Comm {
    fn drop(&mut self) {
        // SAFETY: the handle came from ncclCommInitRank and is dropped once. Abort,
        // not destroy: destroy waits for peers, which may be gone.
        let _ = unsafe { result::comm_abort(self.0) };
    }
}

/// This process's rank in a group of GPUs joined over NCCL.
pub struct NcclGroup {
    comm: Mutex<Comm>,
    stream: Arc<CudaStream>,
    rank: usize,
    world_size: usize,
    ordinal: usize,
}

impl std::fmt::Debug for NcclGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclGroup")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("device", &Device::Cuda(self.ordinal))
            .finish()
    }
}

impl NcclGroup {
    /// Joins the job described by torchrun's variables ([`LaunchEnv::from_env`]) on GPU
    /// `LOCAL_RANK`, exchanging the id through the rendezvous store within `timeout`.
    pub fn from_env(timeout: Duration) -> Result<NcclGroup> {
        let env = LaunchEnv::from_env()?;
        require_library()?;
        let id = if env.rank == 0 {
            let id = unique_id()?;
            let server = RendezvousServer::bind(("0.0.0.0", env.master_port))?;
            server.serve(env.world_size, &id, timeout)?;
            id
        } else {
            let bytes = fetch(env.master(), env.rank, env.world_size, timeout)?;
            bytes
                .try_into()
                .map_err(|b: Vec<u8>| DistError::Rendezvous {
                    address: env.master(),
                    message: format!("received {} bytes, an NCCL id has 128", b.len()),
                })?
        };
        NcclGroup::new(env.rank, env.world_size, env.local_rank, &id)
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
        let stream = tensor_core::cuda::default_stream(ordinal)?;
        let unique = sys::ncclUniqueId {
            internal: id.map(|b| b as std::ffi::c_char),
        };
        let mut comm = std::mem::MaybeUninit::uninit();
        // SAFETY: `comm` is written by NCCL on success and read only then; the device's
        // primary context is current on this thread (default_stream bound it).
        let comm = unsafe {
            stream
                .context()
                .bind_to_thread()
                .map_err(|e| DistError::Nccl {
                    op: OP,
                    message: e.to_string(),
                })?;
            result::comm_init_rank(comm.as_mut_ptr(), world_size as i32, unique, rank as i32)
                .map_err(nccl_error("ncclCommInitRank"))?;
            comm.assume_init()
        };
        Ok(NcclGroup {
            comm: Mutex::new(Comm(comm)),
            stream,
            rank,
            world_size,
            ordinal,
        })
    }

    fn comm(&self) -> MutexGuard<'_, Comm> {
        self.comm.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A zeroed device buffer like `tensor` with `len` elements.
    fn buffer(&self, dtype: DType, len: usize) -> Result<CudaStorage> {
        Ok(CudaStorage::alloc(self.ordinal, dtype, len)?)
    }
}

/// The device buffer of a (checked: contiguous, on this device) tensor.
fn storage(t: &Tensor) -> &CudaStorage {
    match t.storage() {
        Storage::Cuda(s) => s,
        _ => unreachable!("check::tensor put it on a CUDA device"),
    }
}

/// NCCL's datatype for the element bytes of `dtype` (movement moves bytes).
fn reduce_type(dtype: DType) -> sys::ncclDataType_t {
    match dtype {
        DType::F32 => sys::ncclDataType_t::ncclFloat32,
        DType::F64 => sys::ncclDataType_t::ncclFloat64,
        _ => sys::ncclDataType_t::ncclInt64,
    }
}

const BYTES: sys::ncclDataType_t = sys::ncclDataType_t::ncclUint8;

impl NcclGroup {
    /// `*tensor` replaced by a new buffer filled by `fill(send, recv)`.
    fn out_of_place(
        &self,
        input: &Tensor,
        out_len: usize,
        dims: &[usize],
        fill: impl FnOnce(u64, u64, *mut c_void) -> Result<()>,
    ) -> Result<Tensor> {
        let mut out = self.buffer(input.dtype(), out_len)?;
        let src = storage(input);
        let offset = (input.storage_offset() * input.dtype().size_in_bytes()) as u64;
        {
            let (send, _read) = src.bytes().device_ptr(&self.stream);
            let (recv, _write) = out.bytes_mut().device_ptr_mut(&self.stream);
            fill(send + offset, recv, self.stream.cu_stream() as *mut c_void)?;
        }
        Ok(Tensor::from_storage(Storage::Cuda(out), dims)?)
    }
}

impl ProcessGroup for NcclGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world_size
    }

    fn backend(&self) -> Backend {
        Backend::Nccl
    }

    /// The GPU this rank drives (`LOCAL_RANK`).
    fn device(&self) -> Device {
        Device::Cuda(self.ordinal)
    }

    fn all_reduce(&self, tensor: &mut Tensor, op: ReduceOp) -> Result<()> {
        const OP: &str = "all_reduce";
        check::tensor(OP, "tensor", tensor, self.device())?;
        check::reducible(OP, tensor.dtype())?;
        let ReduceOp::Sum = op;
        let (n, dtype) = (tensor.elem_count(), tensor.dtype());
        let comm = self.comm();
        *tensor = self.out_of_place(tensor, n, tensor.dims(), |send, recv, stream| {
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
            .map(drop)
            .map_err(nccl_error("ncclAllReduce"))
        })?;
        Ok(())
    }

    fn broadcast(&self, tensor: &mut Tensor, src: usize) -> Result<()> {
        const OP: &str = "broadcast";
        check::tensor(OP, "tensor", tensor, self.device())?;
        check::root(OP, src, self.world_size)?;
        let bytes = tensor.elem_count() * tensor.dtype().size_in_bytes();
        let comm = self.comm();
        *tensor = self.out_of_place(
            tensor,
            tensor.elem_count(),
            tensor.dims(),
            |send, recv, stream| {
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
                .map(drop)
                .map_err(nccl_error("ncclBroadcast"))
            },
        )?;
        Ok(())
    }

    fn all_gather(&self, output: &mut Tensor, input: &Tensor, counts: &[usize]) -> Result<()> {
        let world = self.world_size;
        check::all_gather(output, input, counts, self.rank, world, self.device())?;
        let size = input.dtype().size_in_bytes();
        let comm = self.comm();
        let even = counts.iter().all(|&c| c == counts[0]);
        let starts = offsets(counts);
        *output = self.out_of_place(
            input,
            output.elem_count(),
            output.dims(),
            |send, recv, stream| {
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
                    .map(drop)
                    .map_err(nccl_error("ncclAllGather"));
                }
                let sends = vec![counts[self.rank]; world];
                grouped_exchange(
                    &comm,
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

    fn all_to_all(
        &self,
        output: &mut Tensor,
        input: &Tensor,
        output_counts: &[usize],
        input_counts: &[usize],
    ) -> Result<()> {
        let world = self.world_size;
        check::all_to_all(
            output,
            input,
            output_counts,
            input_counts,
            world,
            self.device(),
        )?;
        let size = input.dtype().size_in_bytes();
        let comm = self.comm();
        let (send_starts, recv_starts) = (offsets(input_counts), offsets(output_counts));
        *output = self.out_of_place(
            input,
            output.elem_count(),
            output.dims(),
            |send, recv, stream| {
                grouped_exchange(
                    &comm,
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

    fn barrier(&self) -> Result<()> {
        let mut one = Tensor::zeros(&[1], DType::F32, self.device())?;
        self.all_reduce(&mut one, ReduceOp::Sum)?;
        self.stream.synchronize().map_err(|e| DistError::Nccl {
            op: "barrier",
            message: e.to_string(),
        })
    }
}

/// Every rank sends `send_counts[q]` elements from `send + send_starts[q]` to rank `q`
/// and receives `recv_counts[q]` into `recv + recv_starts[q]`, in one NCCL group (the
/// all-to-all NCCL has no single call for). Runs of zero elements are skipped on both
/// sides alike, since the counts pair up.
#[allow(clippy::too_many_arguments)]
fn grouped_exchange(
    comm: &Comm,
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
            first_error = first_error.and(r.map(drop).map_err(nccl_error("ncclSend")));
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
            first_error = first_error.and(r.map(drop).map_err(nccl_error("ncclRecv")));
        }
    }
    // The group is always closed, even after a failed call inside it.
    let end = result::group_end()
        .map(drop)
        .map_err(nccl_error("ncclGroupEnd"));
    first_error.and(end)
}
