//! `ProcessGroup`: the collectives data parallel needs, behind one trait.

use std::fmt;
use std::str::FromStr;

use tensor_core::{Device, Tensor};

use crate::engine::{AllGather, AllToAll, Broadcast, Engine, Sum};
use crate::{DistError, Result};

/// Which engine moves the data. Names follow `torch.distributed`'s backend strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Ranks are threads of one process ([`crate::ThreadGroup`]); always built.
    Threads,
    /// Ranks are processes started by `mpirun`, over the system MPI (feature `mpi`).
    Mpi,
    /// One process per GPU over NCCL (feature `nccl`).
    Nccl,
    /// One process per CPU rank over Gloo, PyTorch's CPU backend (feature `gloo`).
    Gloo,
    /// A backend written outside ditto (an [`Engine`](crate::engine::Engine) of another
    /// crate), by its name.
    Custom(&'static str),
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Threads => "threads",
            Backend::Mpi => "mpi",
            Backend::Nccl => "nccl",
            Backend::Gloo => "gloo",
            Backend::Custom(name) => name,
        })
    }
}

impl FromStr for Backend {
    type Err = DistError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "threads" => Ok(Backend::Threads),
            "mpi" => Ok(Backend::Mpi),
            "nccl" => Ok(Backend::Nccl),
            "gloo" => Ok(Backend::Gloo),
            other => Err(DistError::invalid(
                "Backend::from_str",
                format!("unknown backend {other:?}; expected threads, mpi or nccl"),
            )),
        }
    }
}

/// The reduction of [`ProcessGroup::all_reduce`]. Only the sum: data parallel needs
/// nothing else, and every backend supports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReduceOp {
    /// Element-wise sum.
    Sum,
}

/// A group of `world_size` ranks that run the same collectives in the same order, like
/// a `torch.distributed` process group.
///
/// Every method is a collective: all ranks call it, with fitting arguments, or none may
/// complete. Tensors are contiguous and the results replace the output tensor's value
/// (ditto's tensors are copy-on-write, so nothing else that shared its storage changes).
/// The threads and MPI backends move host (CPU) tensors; NCCL moves tensors on the
/// rank's GPU. A bad argument is a typed error on the rank that passed it, before any
/// data moves; ranks that disagree get [`DistError::Mismatch`] where the backend can
/// see it (threads do; MPI and NCCL trust the caller, as their C APIs do).
///
/// **Sum order.** `all_reduce` is the backend's own algorithm: deterministic for a fixed
/// world size, but its association order changes with the world size, the message size
/// and (NCCL) the topology. For sums that do not depend on the world size, use
/// [`crate::ddp`]'s invariant mode, built from [`all_to_all`](Self::all_to_all) and
/// [`all_gather`](Self::all_gather).
///
/// **Checks once, then moves.** Every method is provided: it checks this rank's
/// arguments (the same checks, with the same errors, for every backend) and then hands
/// them, as a struct that only a passed check can build, to the backend's
/// [`Engine`](crate::engine::Engine) (the half that moves data, like a c10d `Backend`
/// behind PyTorch's `ProcessGroup`). So no backend can skip a check or word it
/// differently. Every `Engine` is a `ProcessGroup` (a blanket impl): a new backend,
/// in ditto or in another crate, implements `Engine`.
pub trait ProcessGroup: Send + Sync + Engine {
    /// This process's (or thread's) rank, `0..world_size`.
    fn rank(&self) -> usize {
        self.info().rank
    }

    /// Number of ranks.
    fn world_size(&self) -> usize {
        self.info().world_size
    }

    /// The engine.
    fn backend(&self) -> Backend {
        self.info().backend
    }

    /// The device whose tensors the collectives move: the CPU for threads and MPI, the
    /// rank's GPU for NCCL.
    fn device(&self) -> Device {
        self.info().device
    }

    /// Replaces `tensor` on every rank with the element-wise reduction of every rank's
    /// `tensor` (same dtype and element count everywhere). Dtypes: f32, f64, i64.
    fn all_reduce(&self, tensor: &mut Tensor, op: ReduceOp) -> Result<()> {
        let args = Sum::check(tensor, self.info())?;
        match op {
            ReduceOp::Sum => self.run_sum(args),
        }
    }

    /// Replaces `tensor` on every rank with rank `src`'s (same dtype and element count
    /// everywhere). Any dtype.
    fn broadcast(&self, tensor: &mut Tensor, src: usize) -> Result<()> {
        self.run_broadcast(Broadcast::check(tensor, src, self.info())?)
    }

    /// Sets `output` to every rank's `input`, concatenated in rank order. `counts[q]` is
    /// the element count of rank `q`'s input (they may differ, and be zero), the same
    /// list on every rank; `output` must hold their sum. Any dtype.
    fn all_gather(&self, output: &mut Tensor, input: &Tensor, counts: &[usize]) -> Result<()> {
        self.run_all_gather(AllGather::check(output, input, counts, self.info())?)
    }

    /// `torch.distributed.all_to_all_single` with split sizes: rank `r` sends elements
    /// `input_counts[..q].sum() ..` (`input_counts[q]` of them) of `input` to rank `q`,
    /// and `output` becomes what every rank sent to `r`, in rank order
    /// (`output_counts[q]` elements from rank `q`). The counts must pair up across ranks.
    /// Any dtype.
    fn all_to_all(
        &self,
        output: &mut Tensor,
        input: &Tensor,
        output_counts: &[usize],
        input_counts: &[usize],
    ) -> Result<()> {
        let args = AllToAll::check(output, input, output_counts, input_counts, self.info())?;
        self.run_all_to_all(args)
    }

    /// Returns once every rank has called it.
    fn barrier(&self) -> Result<()> {
        self.run_barrier()
    }

    /// The error of a collective that failed after its call returned, if any. NCCL's
    /// collectives are enqueued on the GPU's stream and return; one that times out there
    /// is aborted, and the stream goes on with its output unfilled. Call this after
    /// reading on the host a value computed from collectives (the loss of a step): an
    /// error means that value must not be used. Cheap (no device call); the next
    /// collective reports the same error.
    fn check_completed(&self) -> Result<()> {
        self.run_check_completed()
    }
}

/// Every backend is a process group: the methods above are its whole public face.
impl<G: Engine> ProcessGroup for G {}

/// Splits `n` elements into `parts` runs as evenly as possible, the longer runs first
/// (`[3, 3, 2, 2]` for 10 into 4): how gradient buffers are chunked between ranks.
#[must_use]
pub fn even_counts(n: usize, parts: usize) -> Vec<usize> {
    if parts == 0 {
        return Vec::new();
    }
    let (base, extra) = (n / parts, n % parts);
    (0..parts).map(|q| base + usize::from(q < extra)).collect()
}

/// Start offsets of runs of `counts` (the exclusive prefix sum).
#[must_use]
pub fn offsets(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0usize, |acc, &c| {
            let start = *acc;
            *acc += c;
            Some(start)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_counts_put_the_longer_runs_first() {
        assert_eq!(even_counts(10, 4), [3, 3, 2, 2]);
        assert_eq!(even_counts(3, 4), [1, 1, 1, 0]);
        assert_eq!(even_counts(0, 2), [0, 0]);
        assert!(even_counts(5, 0).is_empty());
        assert_eq!(offsets(&[3, 0, 2]), [0, 3, 3]);
    }

    #[test]
    fn backend_names_round_trip() {
        for b in [Backend::Threads, Backend::Mpi, Backend::Nccl, Backend::Gloo] {
            assert_eq!(b.to_string().parse::<Backend>().unwrap(), b);
        }
        assert!("ucc".parse::<Backend>().is_err());
    }
}
