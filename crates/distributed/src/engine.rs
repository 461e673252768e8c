//! What a backend implements: [`Engine`], the half of a process group that moves data,
//! and the checked arguments it receives.
//!
//! [`ProcessGroup`](crate::ProcessGroup) is the half users call. Its collectives check
//! their arguments here, once for every backend, and hand the engine an argument struct
//! ([`Sum`], [`Broadcast`], [`AllGather`], [`AllToAll`]) that only these checks build
//! (each is `#[non_exhaustive]`, so no other crate can make one). An engine that holds
//! one therefore knows the checks passed; none of the threads, MPI and NCCL backends
//! repeats or can forget them.
//! PyTorch's c10d is split the same way (`ProcessGroup` in front of a `Backend`).
//!
//! A backend written outside ditto (another transport, a test double) implements
//! [`Engine`] the same way and gets [`ProcessGroup`](crate::ProcessGroup), with its
//! checks, from the blanket impl: it reports itself as [`Backend::Custom`], and since it
//! can receive the argument structs but not build them, it cannot be handed arguments
//! that skipped a check either (`crates/distributed/tests/integration/custom_backend.rs` is one).

use tensor_core::{DType, Device, Tensor};

use crate::{Backend, DistError, Result};

/// Who a rank is: the answers of [`ProcessGroup`](crate::ProcessGroup)'s getters, fixed
/// when the group is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupInfo {
    /// This rank, `0..world_size`.
    pub rank: usize,
    /// Number of ranks.
    pub world_size: usize,
    /// The engine.
    pub backend: Backend,
    /// The device whose tensors the collectives move.
    pub device: Device,
}

/// A backend's collectives, called by [`ProcessGroup`](crate::ProcessGroup) with
/// arguments that passed this rank's checks. What only one backend can check (MPI's
/// `int` counts) it still checks itself.
pub trait Engine: Send + Sync {
    /// This rank's place in the group.
    fn info(&self) -> GroupInfo;

    /// `all_reduce` with [`ReduceOp::Sum`](crate::ReduceOp::Sum).
    fn run_sum(&self, args: Sum<'_>) -> Result<()>;

    /// `broadcast`.
    fn run_broadcast(&self, args: Broadcast<'_>) -> Result<()>;

    /// `all_gather`.
    fn run_all_gather(&self, args: AllGather<'_>) -> Result<()>;

    /// `all_to_all`.
    fn run_all_to_all(&self, args: AllToAll<'_>) -> Result<()>;

    /// `barrier` (it has no arguments to check).
    fn run_barrier(&self) -> Result<()>;

    /// `check_completed`: the error of a collective that failed after its call returned.
    /// Backends whose collectives complete inside their calls have none.
    fn run_check_completed(&self) -> Result<()> {
        Ok(())
    }
}

/// The dtypes `all_reduce` sums. A backend matches on it exhaustively, so a dtype added
/// here is a compile error in every backend, not a silent fall-through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SumDtype {
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// `i64` (wrapping).
    I64,
}

/// Checked `all_reduce` arguments: `tensor` is contiguous, on the group's device, of
/// a dtype that sums.
#[derive(Debug)]
#[non_exhaustive]
pub struct Sum<'a> {
    /// The tensor every rank's values are summed into.
    pub tensor: &'a mut Tensor,
    /// Its dtype.
    pub dtype: SumDtype,
}

/// Checked `broadcast` arguments: `tensor` is contiguous and on the group's device,
/// `src` is a rank.
#[derive(Debug)]
#[non_exhaustive]
pub struct Broadcast<'a> {
    /// Replaced by rank `src`'s value.
    pub tensor: &'a mut Tensor,
    /// The rank whose value every rank receives.
    pub src: usize,
}

/// Checked `all_gather` arguments: both tensors contiguous, on the group's device, of
/// one dtype; `counts` has one entry per rank, sums to `output`'s elements, and this
/// rank's entry is `input`'s.
#[derive(Debug)]
#[non_exhaustive]
pub struct AllGather<'a> {
    /// Receives every rank's input, in rank order.
    pub output: &'a mut Tensor,
    /// This rank's contribution.
    pub input: &'a Tensor,
    /// Every rank's element count.
    pub counts: &'a [usize],
}

/// Checked `all_to_all` arguments: both tensors contiguous, on the group's device, of
/// one dtype; each count list has one entry per rank and sums to its tensor's elements.
#[derive(Debug)]
#[non_exhaustive]
pub struct AllToAll<'a> {
    /// Receives `output_counts[q]` elements from each rank `q`, in rank order.
    pub output: &'a mut Tensor,
    /// Sends `input_counts[q]` elements to each rank `q`, in rank order.
    pub input: &'a Tensor,
    /// Elements received from each rank.
    pub output_counts: &'a [usize],
    /// Elements sent to each rank.
    pub input_counts: &'a [usize],
}

impl<'a> Sum<'a> {
    /// `all_reduce`'s checks on this rank.
    pub(crate) fn check(tensor: &'a mut Tensor, info: GroupInfo) -> Result<Self> {
        const OP: &str = "all_reduce";
        check_tensor(OP, "tensor", tensor, info.device)?;
        let dtype = match tensor.dtype() {
            DType::F32 => SumDtype::F32,
            DType::F64 => SumDtype::F64,
            DType::I64 => SumDtype::I64,
            other => {
                return Err(DistError::invalid(
                    OP,
                    format!("cannot sum dtype {other}; supported: f32, f64, i64"),
                ))
            }
        };
        Ok(Sum { tensor, dtype })
    }
}

impl<'a> Broadcast<'a> {
    /// `broadcast`'s checks on this rank.
    pub(crate) fn check(tensor: &'a mut Tensor, src: usize, info: GroupInfo) -> Result<Self> {
        const OP: &str = "broadcast";
        check_tensor(OP, "tensor", tensor, info.device)?;
        if src >= info.world_size {
            return Err(DistError::invalid(
                OP,
                format!("source rank {src} is not in 0..{}", info.world_size),
            ));
        }
        Ok(Broadcast { tensor, src })
    }
}

impl<'a> AllGather<'a> {
    /// `all_gather`'s checks on this rank.
    pub(crate) fn check(
        output: &'a mut Tensor,
        input: &'a Tensor,
        counts: &'a [usize],
        info: GroupInfo,
    ) -> Result<Self> {
        const OP: &str = "all_gather";
        check_pair(OP, output, input, info.device)?;
        check_counts(OP, "counts", counts, info.world_size, output.elem_count())?;
        let rank = info.rank;
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
        Ok(AllGather {
            output,
            input,
            counts,
        })
    }
}

impl<'a> AllToAll<'a> {
    /// `all_to_all`'s checks on this rank.
    pub(crate) fn check(
        output: &'a mut Tensor,
        input: &'a Tensor,
        output_counts: &'a [usize],
        input_counts: &'a [usize],
        info: GroupInfo,
    ) -> Result<Self> {
        const OP: &str = "all_to_all";
        let world = info.world_size;
        check_pair(OP, output, input, info.device)?;
        check_counts(
            OP,
            "output_counts",
            output_counts,
            world,
            output.elem_count(),
        )?;
        check_counts(OP, "input_counts", input_counts, world, input.elem_count())?;
        Ok(AllToAll {
            output,
            input,
            output_counts,
            input_counts,
        })
    }
}

/// `t` is contiguous and on `device`.
fn check_tensor(op: &'static str, what: &str, t: &Tensor, device: Device) -> Result<()> {
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

/// `output` and `input` pass [`check_tensor`] and agree in dtype.
fn check_pair(op: &'static str, output: &Tensor, input: &Tensor, device: Device) -> Result<()> {
    check_tensor(op, "output", output, device)?;
    check_tensor(op, "input", input, device)?;
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

/// `counts` has one entry per rank and sums to `total` without overflow.
fn check_counts(
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank 1 of 2 on the CPU: checks need only a [`GroupInfo`], no running group.
    const RANK_1_OF_2: GroupInfo = GroupInfo {
        rank: 1,
        world_size: 2,
        backend: Backend::Threads,
        device: Device::Cpu,
    };

    fn cpu(values: Vec<f32>) -> Tensor {
        let n = values.len();
        Tensor::from_vec(values, &[n], Device::Cpu).unwrap()
    }

    /// The message of an `InvalidArgument` from `op`.
    fn refusal<T: std::fmt::Debug>(op: &str, result: Result<T>) -> String {
        match result {
            Err(DistError::InvalidArgument { op: got, message }) if got == op => message,
            other => panic!("expected {op} to refuse, got {other:?}"),
        }
    }

    #[test]
    fn sums_name_their_dtype_and_refuse_the_others() {
        let mut t = cpu(vec![1.0; 3]);
        assert_eq!(
            Sum::check(&mut t, RANK_1_OF_2).unwrap().dtype,
            SumDtype::F32
        );
        let mut bytes = Tensor::from_vec(vec![1u8; 3], &[3], Device::Cpu).unwrap();
        let message = refusal("all_reduce", Sum::check(&mut bytes, RANK_1_OF_2));
        assert_eq!(message, "cannot sum dtype u8; supported: f32, f64, i64");
    }

    #[test]
    fn a_tensor_on_another_device_is_refused_before_anything_moves() {
        let gpu = GroupInfo {
            device: Device::Cuda(0),
            ..RANK_1_OF_2
        };
        let mut t = cpu(vec![1.0; 3]);
        let message = refusal("broadcast", Broadcast::check(&mut t, 0, gpu));
        assert!(message.starts_with("tensor is on cpu"), "{message}");
        let message = refusal("broadcast", Broadcast::check(&mut t, 2, RANK_1_OF_2));
        assert_eq!(message, "source rank 2 is not in 0..2");
    }

    #[test]
    fn counts_must_fit_the_world_the_tensors_and_this_rank() {
        let (mut out, input) = (cpu(vec![0.0; 5]), cpu(vec![1.0; 2]));
        assert!(AllGather::check(&mut out, &input, &[3, 2], RANK_1_OF_2).is_ok());
        let message = refusal(
            "all_gather",
            AllGather::check(&mut out, &input, &[2, 3], RANK_1_OF_2),
        );
        assert_eq!(
            message,
            "counts[1] = 3 but this rank's input has 2 elements"
        );
        let message = refusal(
            "all_to_all",
            AllToAll::check(&mut out, &input, &[5, 0], &[usize::MAX, 3], RANK_1_OF_2),
        );
        assert_eq!(
            message,
            format!("input_counts [{}, 3] overflows", usize::MAX)
        );
        let message = refusal(
            "all_to_all",
            AllToAll::check(&mut out, &input, &[5], &[1, 1], RANK_1_OF_2),
        );
        assert_eq!(
            message,
            "output_counts has 1 entries, expected one per rank (2)"
        );
    }
}
