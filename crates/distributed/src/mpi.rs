//! The MPI backend (feature `mpi`): ranks are processes started by `mpirun`, and the
//! data moves through the system MPI (OpenMPI or MPICH) via rsmpi.
//!
//! ```text
//! cargo build --release --features mpi --example ddp_train
//! mpirun --allow-run-as-root --oversubscribe -np 4 target/release/examples/ddp_train --backend mpi ...
//! ```
//!
//! Run without `mpirun`, a binary is a world of one. Rank and size come from MPI itself
//! (`mpirun` sets `OMPI_COMM_WORLD_RANK` / `PMI_RANK`, not torchrun's variables).
//!
//! Movement collectives send raw bytes (so every dtype works, f16 and bool included);
//! `all_reduce` uses MPI's typed sum. MPI's own all-reduce picks its algorithm from the
//! process count and message size: measured with OpenMPI 4.1 on 8 f32 micro-shards, it
//! is bit-identical run to run at a fixed `-np` but differs between `-np` 1, 2, 4 and 8
//! (docs/distributed.md#3-why-the-fast-mode-depends-on-the-world-size). That is the fast
//! mode; the invariant mode of [`crate::ddp`] does not use it.
//!
//! MPI's C calls report errors by aborting the job (its default error handler), so
//! every argument is checked here first: element counts must fit MPI's `int` counts.
//! Arguments that only disagree across ranks (one rank sending 5 elements where its
//! peer expects 4) are not visible to one rank; MPI then fails the whole job, as it does
//! for C programs.

use std::sync::{Mutex, MutexGuard};
use std::thread::ThreadId;

use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives, Root};
use mpi::{Count, Threading};
use tensor_core::{DType, Device};

use crate::engine::{AllGather, AllToAll, Broadcast, Engine, GroupInfo, Sum};
use crate::group::offsets;
use crate::host::{like, with_element, with_summable, AsBytes};
use crate::{Backend, DistError, Result};

/// MPI's handles, owned by one [`MpiGroup`]. Dropping them finalizes MPI.
struct Handles {
    world: SimpleCommunicator,
    /// Dropped last (field order): `MPI_Finalize`.
    _universe: Universe,
}

// SAFETY: `SimpleCommunicator` is `!Send` only because an MPI communicator handle may be
// a raw pointer. `MpiGroup` keeps the handles behind a mutex, so MPI calls never run
// concurrently; MPI is initialised with `MPI_THREAD_SERIALIZED`, which allows calls
// from any thread under exactly that condition. When the library provides less,
// `MpiGroup` refuses calls from threads other than the one that initialised it.
unsafe impl Send for Handles {}

/// The process group of all processes `mpirun` started (`MPI_COMM_WORLD`).
///
/// One per process: MPI can be initialised once, and dropping the group finalises it.
pub struct MpiGroup {
    handles: Mutex<Handles>,
    info: GroupInfo,
    /// Set when MPI gave less than `MPI_THREAD_SERIALIZED`: the only thread allowed in.
    only_thread: Option<ThreadId>,
}

impl std::fmt::Debug for MpiGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiGroup")
            .field("rank", &self.info.rank)
            .field("world_size", &self.info.world_size)
            .finish()
    }
}

impl MpiGroup {
    /// Initialises MPI and joins `MPI_COMM_WORLD`. Errors if MPI was already initialised
    /// in this process (by another `MpiGroup` or by other code).
    pub fn init() -> Result<MpiGroup> {
        let (universe, provided) = mpi::initialize_with_threading(Threading::Serialized)
            .ok_or_else(|| DistError::BackendUnavailable {
                backend: Backend::Mpi,
                reason:
                    "MPI is already initialised in this process; create one MpiGroup per process"
                        .into(),
            })?;
        let world = universe.world();
        let (rank, size) = (world.rank(), world.size());
        let serialized = matches!(provided, Threading::Serialized | Threading::Multiple);
        Ok(MpiGroup {
            info: GroupInfo {
                rank: usize::try_from(rank).expect("MPI ranks are non-negative"),
                world_size: usize::try_from(size).expect("MPI sizes are positive"),
                backend: Backend::Mpi,
                device: Device::Cpu,
            },
            handles: Mutex::new(Handles {
                world,
                _universe: universe,
            }),
            only_thread: (!serialized).then(|| std::thread::current().id()),
        })
    }

    /// The communicator, for one collective at a time.
    fn world(&self, op: &'static str) -> Result<MutexGuard<'_, Handles>> {
        if let Some(id) = self.only_thread {
            if std::thread::current().id() != id {
                return Err(DistError::invalid(
                    op,
                    "this MPI library does not allow calls from more than one thread \
                     (it provided less than MPI_THREAD_SERIALIZED); call from the thread that created the group",
                ));
            }
        }
        // A panic cannot happen while the lock is held (the calls below do not panic
        // after the checks), so a poisoned lock still guards valid handles.
        Ok(self.handles.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// `n` as an MPI count, or an error naming the limit.
fn count(op: &'static str, n: usize) -> Result<Count> {
    Count::try_from(n).map_err(|_| {
        DistError::invalid(
            op,
            format!(
                "{n} elements (or bytes) exceed MPI's count limit of {}",
                Count::MAX
            ),
        )
    })
}

/// Byte counts and displacements of runs of `counts` elements of `dtype`.
fn byte_partition(
    op: &'static str,
    dtype: DType,
    counts: &[usize],
) -> Result<(Vec<Count>, Vec<Count>)> {
    let size = dtype.size_in_bytes();
    let total: usize = counts.iter().sum();
    count(op, total.saturating_mul(size))?;
    let bytes: Vec<Count> = counts
        .iter()
        .map(|&c| c * size)
        .map(|b| b as Count)
        .collect();
    let displs = offsets(counts)
        .iter()
        .map(|&o| (o * size) as Count)
        .collect();
    Ok((bytes, displs))
}

/// A byte for empty buffers to point at. An empty Rust slice of bytes has the dangling
/// address 1, which OpenMPI reads as `MPI_IN_PLACE` (`(void *) 1`): an empty send
/// buffer would silently turn a collective into its in-place form, and an empty
/// broadcast fails with `MPI_ERR_ARG`. Empty buffers point here instead.
static ANCHOR: [u8; 1] = [0];

/// `bytes`, or an empty slice with a real address.
fn anchored(bytes: &[u8]) -> &[u8] {
    if bytes.is_empty() {
        &ANCHOR[..0]
    } else {
        bytes
    }
}

/// A zeroed receive buffer of `n` bytes with a real address even when `n == 0` (one
/// spare byte, cut off by the caller).
fn receive_buffer(n: usize) -> Vec<u8> {
    vec![0u8; n.max(1)]
}

/// MPI's typed sum of `values` across ranks.
fn sum<T>(world: &SimpleCommunicator, values: &[T]) -> Vec<T>
where
    T: mpi::datatype::Equivalence + Copy + Default,
{
    let mut out = vec![T::default(); values.len()];
    // Every rank has the same count, so all of them skip an empty sum together.
    if !values.is_empty() {
        world.all_reduce_into(values, &mut out[..], SystemOperation::sum());
    }
    out
}

impl Engine for MpiGroup {
    fn info(&self) -> GroupInfo {
        self.info
    }

    fn run_sum(&self, args: Sum<'_>) -> Result<()> {
        const OP: &str = "all_reduce";
        let Sum { tensor, dtype } = args;
        count(OP, tensor.elem_count())?;
        let handles = self.world(OP)?;
        *tensor =
            with_summable!(dtype, T => like(tensor, sum(&handles.world, tensor.as_slice::<T>()?))?);
        Ok(())
    }

    fn run_broadcast(&self, args: Broadcast<'_>) -> Result<()> {
        const OP: &str = "broadcast";
        let Broadcast { tensor, src } = args;
        count(OP, tensor.elem_count() * tensor.dtype().size_in_bytes())?;
        let handles = self.world(OP)?;
        let root = handles.world.process_at_rank(src as Count);
        *tensor = with_element!(tensor.dtype(), T => {
            let mut bytes = T::bytes(tensor.as_slice::<T>()?).to_vec();
            // Every rank has the same count, so all of them skip an empty broadcast.
            if !bytes.is_empty() {
                root.broadcast_into(&mut bytes[..]);
            }
            like(tensor, T::from_bytes(&bytes))?
        });
        Ok(())
    }

    fn run_all_gather(&self, args: AllGather<'_>) -> Result<()> {
        const OP: &str = "all_gather";
        let (output, input) = (args.output, args.input);
        let (byte_counts, displs) = byte_partition(OP, output.dtype(), args.counts)?;
        let handles = self.world(OP)?;
        *output = with_element!(output.dtype(), T => {
            let len = output.elem_count() * std::mem::size_of::<T>();
            let mut received = receive_buffer(len);
            let mut into = PartitionMut::new(&mut received[..], byte_counts, displs);
            let send = anchored(T::bytes(input.as_slice::<T>()?));
            handles.world.all_gather_varcount_into(send, &mut into);
            like(output, T::from_bytes(&received[..len]))?
        });
        Ok(())
    }

    fn run_all_to_all(&self, args: AllToAll<'_>) -> Result<()> {
        const OP: &str = "all_to_all";
        let (output, input) = (args.output, args.input);
        let (send_counts, send_displs) = byte_partition(OP, input.dtype(), args.input_counts)?;
        let (recv_counts, recv_displs) = byte_partition(OP, output.dtype(), args.output_counts)?;
        let handles = self.world(OP)?;
        *output = with_element!(output.dtype(), T => {
            let len = output.elem_count() * std::mem::size_of::<T>();
            let mut received = receive_buffer(len);
            let send = anchored(T::bytes(input.as_slice::<T>()?));
            let from = Partition::new(send, send_counts, send_displs);
            let mut into = PartitionMut::new(&mut received[..], recv_counts, recv_displs);
            handles.world.all_to_all_varcount_into(&from, &mut into);
            like(output, T::from_bytes(&received[..len]))?
        });
        Ok(())
    }

    fn run_barrier(&self) -> Result<()> {
        self.world("barrier")?.world.barrier();
        Ok(())
    }
}
