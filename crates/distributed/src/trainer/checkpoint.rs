//! A data parallel run's checkpoint: one file, written by rank 0, that every rank (of
//! any world size, in invariant mode) resumes from.
//!
//! The entries are the single-process trainer's (`model.*`, `optim.*`, `rng.dropout`,
//! the default generators, `loader.state`, `train.step`, `train.loss_history`,
//! `train.config`) plus the reduce mode (`ddp.mode`) and, for the record, the world
//! size that wrote it (`ddp.world_size`). Nothing in it is per rank: models, optimiser
//! buffers and generators are identical on every rank (they take the same steps from
//! the same sums), and the loader state is stored in the run's terms: the global batch
//! size and the position in the epoch, which every world size shares.

use std::path::Path;
use std::sync::Arc;

use nn_mini::train::{config_of, placed, Run, RunConfig};
use nn_mini::Checkpoint;
use tensor_core::{Device, Tensor};

use super::{DdpLoop, DdpPlace};
use crate::{broadcast_flag, DistError, ProcessGroup, ReduceMode, Result};

/// Metadata key of the reduce mode (`fast` or `invariant:<shards>`).
pub const MODE_KEY: &str = "ddp.mode";
/// Metadata key of the world size that wrote the checkpoint (informational).
pub const WORLD_SIZE_KEY: &str = "ddp.world_size";

impl<C: RunConfig> DdpLoop<C> {
    /// Rank 0 runs `write` on [`checkpoint`](Self::checkpoint) and every rank learns
    /// whether that worked: rank 0 gets `write`'s result, the others `None` or a
    /// [`DistError::RemoteFailure`] saying `failed`. A collective.
    pub(super) fn on_rank0<T>(
        &self,
        failed: impl FnOnce() -> String,
        write: impl FnOnce(Checkpoint) -> Result<T>,
    ) -> Result<Option<T>> {
        let group = self.ddp.group();
        let written = match group.rank() {
            0 => self.checkpoint().and_then(write).map(Some),
            _ => Ok(None),
        };
        let ok = broadcast_flag(&**group, written.is_ok(), 0)?;
        let written = written?;
        if !ok {
            return Err(DistError::RemoteFailure {
                rank: 0,
                message: failed(),
            });
        }
        Ok(written)
    }

    /// The configuration and reduce mode stored in a checkpoint.
    pub fn config_of(ck: &Checkpoint) -> Result<(C, ReduceMode)> {
        if ck.metadata(MODE_KEY).is_none() {
            return Err(DistError::Nn(
                nn_mini::CheckpointError::Inconsistent {
                    name: MODE_KEY.into(),
                    reason: "this checkpoint was not written by a data parallel run \
                             (DdpTrainer, ddp_train): it has no reduce mode. A \
                             single-process checkpoint (train_resume) resumes with \
                             train_resume"
                        .into(),
                }
                .into(),
            ));
        }
        let config = config_of::<C>(ck)?;
        let mode = ck.require_metadata(MODE_KEY)?.parse()?;
        Ok((config, mode))
    }

    /// Rank 0 reads `path` and sends its bytes to every rank, which all rebuild the run
    /// with [`from_checkpoint`](Self::from_checkpoint) ([`Run::resume_file`]). A
    /// collective; the file needs to exist on rank 0's machine only.
    pub fn resume(
        path: impl AsRef<Path>,
        group: Arc<dyn ProcessGroup>,
        num_workers: Option<usize>,
    ) -> Result<Self> {
        let place = DdpPlace::new(group, None);
        DdpLoop::resume_file(path.as_ref(), &place, &mut placed(None, num_workers))
    }

    /// Rebuilds the saved run on this rank of `group`, whose world size may differ from
    /// the one that saved it (the run stays identical in invariant mode; in fast mode it
    /// continues correctly but with the new world size's sums). The device is the
    /// group's; `num_workers`, when given, replaces the saved count (it never changes a
    /// number). Cross-checks, before building anything, what the single-process trainer
    /// checks: model shapes against the configuration, the loss history against the
    /// step, the loader's key and position against the run.
    pub fn from_checkpoint(
        ck: &Checkpoint,
        group: Arc<dyn ProcessGroup>,
        num_workers: Option<usize>,
    ) -> Result<Self> {
        let place = DdpPlace::new(group, None);
        DdpLoop::from_checkpoint_in(ck, &place, &mut placed(None, num_workers))
    }
}

/// The largest checkpoint [`DdpLoop::resume`](super::DdpLoop::resume) moves between ranks (the demo's is
/// under 1 MB; the flags' ranges keep any `ddp_train` run far below this). The other
/// ranks allocate what rank 0 announces, so the announcement is capped first.
pub const MAX_CHECKPOINT_BYTES: u64 = 1 << 30;

/// Rank 0's bytes of `path`, on every rank; every rank errors when rank 0 could not
/// read it (see [`broadcast_from_rank0`]).
pub(super) fn broadcast_file(group: &dyn ProcessGroup, path: &Path) -> Result<Vec<u8>> {
    let read = match group.rank() {
        0 => read_capped(path).map(Some),
        _ => Ok(None),
    };
    let what = || format!("the checkpoint {}", path.display());
    broadcast_from_rank0(group, read, what)?.ok_or_else(|| DistError::RemoteFailure {
        rank: 0,
        message: format!("found no bytes in {}", what()),
    })
}

/// What rank 0 passes in `rank0` (other ranks pass anything; only rank 0's counts), on
/// every rank: a length, then the bytes. A length of -1 says rank 0 failed (it returns
/// its own error, every other rank a [`DistError::RemoteFailure`] naming `what`), -2
/// that rank 0 had nothing (`None` everywhere). Bytes over [`MAX_CHECKPOINT_BYTES`] are
/// refused by rank 0 before it announces them, and an announced length over it by every
/// other rank before it allocates. A collective.
pub(super) fn broadcast_from_rank0(
    group: &dyn ProcessGroup,
    rank0: Result<Option<Vec<u8>>>,
    what: impl Fn() -> String,
) -> Result<Option<Vec<u8>>> {
    const FAILED: i64 = -1;
    const NOTHING: i64 = -2;
    let device = group.device();
    let rank0 = match rank0 {
        Ok(Some(bytes)) if bytes.len() as u64 > MAX_CHECKPOINT_BYTES => Err(DistError::invalid(
            "DdpTrainer::resume",
            format!(
                "{} has {} bytes; at most {MAX_CHECKPOINT_BYTES} are moved between ranks",
                what(),
                bytes.len()
            ),
        )),
        other => other,
    };
    let len = match &rank0 {
        Ok(Some(bytes)) => bytes.len() as i64,
        Ok(None) => NOTHING,
        Err(_) => FAILED,
    };
    let mut header = Tensor::from_vec(vec![len], &[1], Device::Cpu)?.to_device(device)?;
    group.broadcast(&mut header, 0)?;
    let len = header.to_vec::<i64>()?[0];
    let mine = match (group.rank(), rank0) {
        (0, Err(e)) => return Err(e),
        (0, Ok(bytes)) => bytes,
        _ => None,
    };
    let len = match u64::try_from(len) {
        Ok(n) if n <= MAX_CHECKPOINT_BYTES => n as usize,
        Ok(n) => {
            return Err(DistError::RemoteFailure {
                rank: 0,
                message: format!(
                    "announced {} of {n} bytes, more than {MAX_CHECKPOINT_BYTES}",
                    what()
                ),
            })
        }
        Err(_) if len == NOTHING => return Ok(None),
        Err(_) => {
            return Err(DistError::RemoteFailure {
                rank: 0,
                message: format!("could not read {}", what()),
            })
        }
    };
    let mine = mine.unwrap_or_else(|| vec![0u8; len]);
    let mut data = Tensor::from_vec(mine, &[len], Device::Cpu)?.to_device(device)?;
    group.broadcast(&mut data, 0)?;
    Ok(Some(data.to_vec::<u8>()?))
}

/// The bytes of `path`, if it is at most [`MAX_CHECKPOINT_BYTES`] long.
fn read_capped(path: &Path) -> Result<Vec<u8>> {
    let io = |source| DistError::Io {
        context: format!("reading the checkpoint {}", path.display()),
        source,
    };
    let size = std::fs::metadata(path).map_err(io)?.len();
    if size > MAX_CHECKPOINT_BYTES {
        return Err(DistError::invalid(
            "DdpTrainer::resume",
            format!(
                "the checkpoint {} has {size} bytes; at most {MAX_CHECKPOINT_BYTES} are moved between ranks",
                path.display()
            ),
        ));
    }
    std::fs::read(path).map_err(io)
}
