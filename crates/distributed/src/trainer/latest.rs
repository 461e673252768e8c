//! Elastic restarts of a data parallel run: periodic checkpoints in a folder
//! ([`CheckpointDir`]), and every rank resuming from the newest one that loads.
//!
//! Which checkpoint is "the newest that loads" must be one answer for all ranks: ranks
//! that resumed different steps would sum gradients of different models. Ranks could
//! disagree if each looked for itself (a file damaged on one node's copy of a shared
//! folder, a folder on rank 0's machine only, a listing taken while a save lands).
//! So rank 0 decides and sends: it scans the folder, verifies the candidates newest
//! first, and broadcasts the chosen checkpoint's bytes (and its step) to every rank,
//! which all rebuild the run from those same bytes. The folder needs to exist on rank
//! 0's machine only, as with [`DdpTrainer::resume`]; only rank 0 ever writes it.
//!
//! Rank 0 is also the only writer, so in a restart no save of this job is in flight
//! while it scans: its previous incarnation's last save either finished its rename
//! (a complete file) or left only a temporary file, which is not a checkpoint's name.

use std::path::PathBuf;
use std::sync::Arc;

use nn_mini::checkpoint::{CheckpointDir, Saved, Skipped};
use nn_mini::train::TrainingRun;
use nn_mini::Checkpoint;

use super::checkpoint::broadcast_from_rank0;
use super::DdpTrainer;
use crate::{DistError, ProcessGroup, Result};

/// A run resumed by [`DdpTrainer::resume_latest`].
#[derive(Debug)]
pub struct ResumedLatest {
    /// The run, at the checkpoint's step.
    pub trainer: DdpTrainer,
    /// The checkpoint it resumed (the same path on every rank; the file is rank 0's).
    pub path: PathBuf,
    /// Newer checkpoint files that did not load, each with its error: rank 0's scan
    /// (empty on the other ranks, which did not look).
    pub skipped: Vec<Skipped>,
}

impl DdpTrainer {
    /// Saves the run as this step's checkpoint in `dir` (rank 0 writes, atomically, then
    /// removes the oldest checkpoints beyond the folder's `keep`) and tells every rank
    /// whether that worked. Rank 0 gets what it did; the other ranks `None`. A collective.
    pub fn save_in(&self, dir: &CheckpointDir) -> Result<Option<Saved>> {
        let step = self.step_count();
        self.on_rank0(
            || {
                format!(
                    "could not write the checkpoint {}",
                    dir.path_of(step).display()
                )
            },
            |ck| Ok(dir.save(&ck, step)?),
        )
    }

    /// The run saved last in `dir`, resumed on every rank of `group` (any world size, as
    /// with [`resume`](Self::resume)): rank 0 finds the newest checkpoint there that
    /// loads ([`CheckpointDir::latest`]) and sends its bytes to every rank (see the
    /// module docs for why rank 0 decides). `None` on every rank when the folder holds
    /// no checkpoint: the job's first start. When it holds some but none loads, every
    /// rank errors (rank 0 with the list of files and reasons). A collective.
    pub fn resume_latest(
        dir: &CheckpointDir,
        group: Arc<dyn ProcessGroup>,
        num_workers: Option<usize>,
    ) -> Result<Option<ResumedLatest>> {
        let scan = match group.rank() {
            0 => dir.latest().map_err(DistError::from),
            _ => Ok(None),
        };
        let (bytes, skipped) = match scan {
            Ok(Some(latest)) => {
                let bytes = latest.checkpoint.to_bytes().map_err(DistError::from);
                (bytes.map(Some), latest.skipped)
            }
            Ok(None) => (Ok(None), Vec::new()),
            Err(e) => (Err(e), Vec::new()),
        };
        let what = || format!("the newest checkpoint in {}", dir.path().display());
        let Some(bytes) = broadcast_from_rank0(&*group, bytes, what)? else {
            return Ok(None);
        };
        let ck = Checkpoint::from_bytes(&bytes)?;
        let trainer = DdpTrainer::from_checkpoint(&ck, group, num_workers)?;
        // CheckpointDir::latest checked the saved step against the file's name.
        Ok(Some(ResumedLatest {
            path: dir.path_of(trainer.step_count()),
            trainer,
            skipped,
        }))
    }
}
