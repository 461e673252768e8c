//! `ProcessGroup`: the collectives data parallel needs, behind one trait.

use std::fmt;
use std::str::FromStr;

use tensor_core::{DType, Device, Tensor};

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
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Threads => "threads",
            Backend::Mpi => "mpi",
            Backend::Nccl => "nccl",
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
pub trait ProcessGroup: Send + Sync {
    /// This process's (or thread's) rank, `0..world_size`.
    fn rank(&self) -> usize;

    /// Number of ranks.
    fn world_size(&self) -> usize;

    /// The engine.
    fn backend(&self) -> Backend;

    /// The device whose tensors the collectives move: the CPU for threads and MPI, the
    /// rank's GPU for NCCL.
    fn device(&self) -> Device;

    /// Replaces `tensor` on every rank with the element-wise reduction of every rank's
    /// `tensor` (same dtype and element count everywhere). Dtypes: f32, f64, i64.
    fn all_reduce(&self, tensor: &mut Tensor, op: ReduceOp) -> Result<()>;

    /// Replaces `tensor` on every rank with rank `src`'s (same dtype and element count
    /// everywhere). Any dtype.
    fn broadcast(&self, tensor: &mut Tensor, src: usize) -> Result<()>;

    /// Sets `output` to every rank's `input`, concatenated in rank order. `counts[q]` is
    /// the element count of rank `q`'s input (they may differ, and be zero), the same
    /// list on every rank; `output` must hold their sum. Any dtype.
    fn all_gather(&self, output: &mut Tensor, input: &Tensor, counts: &[usize]) -> Result<()>;

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
    ) -> Result<()>;

    /// Returns once every rank has called it.
    fn barrier(&self) -> Result<()>;
}

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

/// Checks shared by every backend. They run before any data moves, on each rank, so a
/// bad argument is reported by the rank that passed it.
pub(crate) mod check {
    use super::*;

    /// `tensor` is contiguous and on `device`.
    pub(crate) fn tensor(op: &'static str, what: &str, t: &Tensor, device: Device) -> Result<()> {
        if t.device() != device {
            return Err(DistError::invalid(
                op,
                format!(
                    "{what} is on {}, this backend moves tensors on {device}",
                    t.device()
                ),
            ));
        }
        if !t.is_contiguous() {
            return Err(DistError::invalid(
                op,
                format!("{what} must be contiguous (call .contiguous() first)"),
            ));
        }
        Ok(())
    }

    /// `src` is a rank.
    pub(crate) fn root(op: &'static str, src: usize, world: usize) -> Result<()> {
        if src >= world {
            return Err(DistError::invalid(
                op,
                format!("source rank {src} is not in 0..{world}"),
            ));
        }
        Ok(())
    }

    /// The dtypes `all_reduce` sums.
    pub(crate) fn reducible(op: &'static str, dtype: DType) -> Result<()> {
        match dtype {
            DType::F32 | DType::F64 | DType::I64 => Ok(()),
            other => Err(DistError::invalid(
                op,
                format!("cannot sum dtype {other}; supported: f32, f64, i64"),
            )),
        }
    }

    /// `counts` has one entry per rank and sums to `total` without overflow.
    pub(crate) fn counts(
        op: &'static str,
        what: &str,
        counts: &[usize],
        world: usize,
        total: usize,
    ) -> Result<()> {
        if counts.len() != world {
            return Err(DistError::invalid(
                op,
                format!(
                    "{what} has {} entries, expected one per rank ({world})",
                    counts.len()
                ),
            ));
        }
        let sum = counts
            .iter()
            .try_fold(0usize, |acc, &c| acc.checked_add(c))
            .ok_or_else(|| DistError::invalid(op, format!("{what} {counts:?} overflows")))?;
        if sum != total {
            return Err(DistError::invalid(
                op,
                format!("{what} {counts:?} sum to {sum}, but the tensor has {total} elements"),
            ));
        }
        Ok(())
    }

    /// Input and output agree in dtype.
    pub(crate) fn same_dtype(op: &'static str, output: &Tensor, input: &Tensor) -> Result<()> {
        if output.dtype() != input.dtype() {
            return Err(DistError::invalid(
                op,
                format!(
                    "output is {} but input is {}; they must match",
                    output.dtype(),
                    input.dtype()
                ),
            ));
        }
        Ok(())
    }

    /// The arguments of `all_gather` on this rank.
    pub(crate) fn all_gather(
        output: &Tensor,
        input: &Tensor,
        counts: &[usize],
        rank: usize,
        world: usize,
        device: Device,
    ) -> Result<()> {
        const OP: &str = "all_gather";
        tensor(OP, "output", output, device)?;
        tensor(OP, "input", input, device)?;
        same_dtype(OP, output, input)?;
        self::counts(OP, "counts", counts, world, output.elem_count())?;
        if counts[rank] != input.elem_count() {
            return Err(DistError::invalid(
                OP,
                format!(
                    "counts[{rank}] = {} but this rank's input has {} elements",
                    counts[rank],
                    input.elem_count()
                ),
            ));
        }
        Ok(())
    }

    /// The arguments of `all_to_all` on this rank.
    pub(crate) fn all_to_all(
        output: &Tensor,
        input: &Tensor,
        output_counts: &[usize],
        input_counts: &[usize],
        world: usize,
        device: Device,
    ) -> Result<()> {
        const OP: &str = "all_to_all";
        tensor(OP, "output", output, device)?;
        tensor(OP, "input", input, device)?;
        same_dtype(OP, output, input)?;
        counts(
            OP,
            "output_counts",
            output_counts,
            world,
            output.elem_count(),
        )?;
        counts(OP, "input_counts", input_counts, world, input.elem_count())
    }
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
        for b in [Backend::Threads, Backend::Mpi, Backend::Nccl] {
            assert_eq!(b.to_string().parse::<Backend>().unwrap(), b);
        }
        assert!("gloo".parse::<Backend>().is_err());
    }
}
