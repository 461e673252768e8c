//! [`Run`] for a data parallel rank: the calls a training binary makes, each a
//! collective where it must be one, so the binary's loop is the single process's.
//!
//! Which checkpoint a restart resumes ("the newest that loads") must be one answer for
//! all ranks: ranks that resumed different steps would sum gradients of different
//! models. Ranks could disagree if each looked for itself (a file damaged on one node's
//! copy of a shared folder, a folder on rank 0's machine only, a listing taken while a
//! save lands). So rank 0 decides and sends: it scans the folder, verifies the
//! candidates newest first, and broadcasts the chosen checkpoint's bytes to every rank,
//! which all rebuild the run from those same bytes. A file named by `--resume` travels
//! the same way; the folder or file needs to exist on rank 0's machine only, and only
//! rank 0 ever writes.
//!
//! Rank 0 is also the only writer, so in a restart no save of this job is in flight
//! while it scans: its previous incarnation's last save either finished its rename
//! (a complete file) or left only a temporary file, which is not a checkpoint's name.

use std::path::Path;
use std::sync::Arc;

use nn_mini::checkpoint::{CheckpointDir, Saved};
use nn_mini::train::{placed, read_history, ModelOf, Run, RunConfig, Started, TrainingRun};
use nn_mini::Checkpoint;
use tensor_core::DType;

use super::checkpoint::{broadcast_file, broadcast_from_rank0};
use super::{DdpLoop, MODE_KEY, WORLD_SIZE_KEY};
use crate::{DistError, LocalRows, ProcessGroup, ReduceMode, Result};

/// Where a data parallel run executes: its process group, and the reduce mode asked
/// for, if any. A fresh run sums in that mode (fast when none was asked for); a resumed
/// run continues in the mode its checkpoint records, and refuses to resume when another
/// one was asked for.
#[derive(Clone)]
pub struct DdpPlace {
    /// The ranks of the job; this process is one of them.
    pub group: Arc<dyn ProcessGroup>,
    /// The reduce mode asked for (`None`: a fresh run's default, a resume's saved one).
    pub mode: Option<ReduceMode>,
}

impl DdpPlace {
    /// This rank of `group`, asking for `mode`.
    #[must_use]
    pub fn new(group: Arc<dyn ProcessGroup>, mode: Option<ReduceMode>) -> Self {
        DdpPlace { group, mode }
    }
}

impl<C: RunConfig> Run for DdpLoop<C> {
    type Error = DistError;
    type Place = DdpPlace;

    /// A collective: every rank calls it with the same configuration (see
    /// [`DdpLoop::new`]).
    fn fresh(config: C, place: &DdpPlace) -> Result<Self> {
        DdpLoop::new(
            config,
            place.mode.unwrap_or(ReduceMode::Fast),
            place.group.clone(),
        )
    }

    /// On this rank of the group, whose world size may differ from the one that saved
    /// (the run stays identical in invariant mode; in fast mode it continues correctly
    /// but with the new world size's sums). The device is the group's whatever `adjust`
    /// does, and the mode the checkpoint's.
    fn from_checkpoint_in(
        ck: &Checkpoint,
        place: &DdpPlace,
        adjust: &mut dyn FnMut(&mut C),
    ) -> Result<Self> {
        let (mut config, mode) = DdpLoop::<C>::config_of(ck)?;
        if let Some(asked) = place.mode.filter(|asked| *asked != mode) {
            return Err(DistError::invalid(
                "DdpTrainer::resume",
                format!(
                    "the checkpoint was saved in {mode} mode, and {asked} was asked for; a \
                     resume continues the saved mode"
                ),
            ));
        }
        adjust(&mut config);
        let workers = config.num_workers();
        config.place(place.group.device(), workers);
        let history = read_history(ck, &config)?;
        let mut trainer = DdpLoop::new(config, mode, place.group.clone())?;
        trainer
            .state
            .restore(ck, trainer.ddp.module_mut(), history)?;
        Ok(trainer)
    }

    /// Rank 0 reads `path` and sends its bytes to every rank. A collective.
    fn resume_file(path: &Path, place: &DdpPlace, adjust: &mut dyn FnMut(&mut C)) -> Result<Self> {
        let bytes = broadcast_file(&*place.group, path)?;
        DdpLoop::from_checkpoint_in(&Checkpoint::from_bytes(&bytes)?, place, adjust)
    }

    /// Rank 0 finds the newest checkpoint in `dir` that loads and sends its bytes to
    /// every rank (the module docs say why rank 0 decides). `None` on every rank when
    /// the folder holds none; when it holds some but none loads, every rank errors
    /// (rank 0 with the list of files and reasons). A collective.
    fn resume_newest(
        dir: &CheckpointDir,
        place: &DdpPlace,
        adjust: &mut dyn FnMut(&mut C),
    ) -> Result<Option<Started<Self>>> {
        let scan = match place.group.rank() {
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
        let Some(bytes) = broadcast_from_rank0(&*place.group, bytes, what)? else {
            return Ok(None);
        };
        let run = DdpLoop::from_checkpoint_in(&Checkpoint::from_bytes(&bytes)?, place, adjust)?;
        // CheckpointDir::latest checked the saved step against the file's name.
        Ok(Some(Started {
            resumed_from: Some(dir.path_of(run.step_count())),
            run,
            skipped,
        }))
    }

    /// One step on this rank's rows of the next global batch: forward (dropout on), the
    /// run's loss, backward, gradients summed across ranks, the run's update. A
    /// collective. The global batch's loss (the same on every rank) is read at once:
    /// the step's collectives waited for the device already.
    fn step_deferred(&mut self) -> Result<()> {
        let batch = self.state.loader_mut().next_batch()?;
        // The batch stays on the host: DDP picks each pass's rows there and uploads them,
        // and cross_entropy checks the targets there (no read back from the device).
        let (input, target) = (batch.input, batch.target);
        let loader = self.loader();
        let batch_rows = loader.global_batch_rows(batch.index);
        let rows: Vec<u64> = match (loader.sampler(), loader.micro_shard_sampler()) {
            (Some(sampler), _) => (0..batch.indices.len())
                .map(|j| sampler.global_row(j) as u64)
                .collect(),
            (None, Some(shards)) => shards.rows(batch_rows),
            (None, None) => {
                return Err(DistError::invalid(
                    "DdpTrainer::step",
                    "the loader has no rank share (DdpLoop::new always gives it one)",
                ))
            }
        };
        let local = LocalRows {
            input: &input,
            target: &target,
            rows: &rows,
            batch_rows: batch_rows as u64,
        };
        let config = self.state.config();
        let loss = self
            .ddp
            .forward_backward(local, |output, target| config.loss(output, target))?;
        let grad_norm = C::update(&mut self.state, self.ddp.module_mut())?;
        // The loss and the gradient norm (when the update clipped) in one read.
        let mut read = vec![loss.to_dtype(DType::F32)?.reshape(&[1])?];
        if let Some(norm) = &grad_norm {
            read.push(
                norm.to_dtype(DType::F32)?
                    .to_device(read[0].device())?
                    .reshape(&[1])?,
            );
        }
        let values = tensor_core::Tensor::cat(&read, 0)?.to_vec::<f32>()?;
        let (loss, grad_norm) = (values[0], values.get(1).copied());
        // The read waited for the step's collectives; one aborted there left garbage.
        self.ddp.group().check_completed()?;
        self.state
            .config()
            .check_losses(self.step_count() + 1, &[loss], &[grad_norm])?;
        self.state.count_step();
        self.state.record_losses([loss]);
        self.unread += 1;
        Ok(())
    }

    fn read_losses(&mut self) -> Result<&[f32]> {
        let losses = self.state.losses();
        let unread = std::mem::take(&mut self.unread);
        Ok(&losses[losses.len() - unread..])
    }

    fn unread_losses(&self) -> usize {
        self.unread
    }

    /// The single process's entries plus the reduce mode (`ddp.mode`) and, for the
    /// record, the world size that wrote it (`ddp.world_size`). The same on every rank;
    /// not a collective.
    fn checkpoint(&self) -> Result<Checkpoint> {
        let mut ck = self.state.checkpoint(self.ddp.module(), &[])?;
        ck.set_metadata(MODE_KEY, self.mode.to_string())?;
        ck.set_metadata(WORLD_SIZE_KEY, self.ddp.group().world_size().to_string())?;
        Ok(ck)
    }

    /// Rank 0 writes, atomically; every rank learns whether that worked. A collective.
    fn save_with(&self, path: impl AsRef<Path>, metadata: &[(&str, &str)]) -> Result<()> {
        let path = path.as_ref();
        self.on_rank0(
            || format!("could not write the checkpoint {}", path.display()),
            |mut ck| {
                for (key, value) in metadata {
                    ck.set_metadata(*key, *value)?;
                }
                Ok(ck.save(path)?)
            },
        )?;
        Ok(())
    }

    /// Rank 0 writes this step's checkpoint in `dir` (atomically) and prunes, then
    /// every rank learns whether that worked: rank 0 gets what it did, the others
    /// `None`. A collective.
    fn save_in(&self, dir: &CheckpointDir) -> Result<Option<Saved>> {
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

    fn model(&self) -> &ModelOf<Self> {
        self.ddp.module()
    }

    fn model_mut(&mut self) -> &mut ModelOf<Self> {
        self.ddp.module_mut()
    }

    fn rank(&self) -> usize {
        self.ddp.group().rank()
    }

    fn placement(&self) -> String {
        let group = self.ddp.group();
        format!(
            "{} rank(s) on {} | {}",
            group.world_size(),
            group.backend(),
            self.mode
        )
    }
}

impl<C: RunConfig> DdpLoop<C> {
    /// The run saved last in `dir`, resumed on every rank of `group` (any world size):
    /// [`Run::resume_newest`] with `num_workers`, when given, replacing the saved count.
    /// `None` on every rank when the folder holds no checkpoint: the job's first start.
    /// A collective.
    pub fn resume_latest(
        dir: &CheckpointDir,
        group: Arc<dyn ProcessGroup>,
        num_workers: Option<usize>,
    ) -> Result<Option<Started<Self>>> {
        let place = DdpPlace::new(group, None);
        DdpLoop::resume_newest(dir, &place, &mut placed(None, num_workers))
    }
}
