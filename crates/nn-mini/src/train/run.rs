//! `Run`: what a training binary does with a run, whatever the model (the MLP, the GPT)
//! and however the run executes (one process, [`TrainLoop`]; one rank of a data
//! parallel job, `distributed::DdpLoop`), and [`start`]: the one way a run begins.
//!
//! A binary's loop is then written once, over `R: Run` (ditto's is
//! `examples/common/train_loop.rs`): start fresh, from a file or from the newest
//! checkpoint of a folder; step (reading losses every few steps, so a GPU is not waited
//! for in each); save periodically or once; report. Everything that differs between a
//! process and a rank (who writes a file, how a checkpoint reaches every rank, where the
//! gradients are summed) is behind this trait, and everything that differs between
//! models is behind [`RunConfig`].
//!
//! [`TrainLoop`]: super::TrainLoop

use std::path::{Path, PathBuf};

use tensor_core::Device;

use crate::checkpoint::{CheckpointDir, Saved, Skipped};
use crate::{Checkpoint, NnError};

use super::{RunConfig, TrainingRun};

/// The model a run of `R` trains.
pub type ModelOf<R> = <<R as TrainingRun>::Config as RunConfig>::Model;

/// How a run begins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// At step 0, from a configuration.
    Fresh,
    /// From the checkpoint in this file.
    File(PathBuf),
    /// From the newest checkpoint in this folder that loads, or at step 0 when it holds
    /// none (a job's first start: the same command line serves every restart).
    Latest(CheckpointDir),
}

/// A run [`start`] began, and where it came from.
#[derive(Debug)]
pub struct Started<R> {
    /// The run, at step 0 or at the checkpoint's step.
    pub run: R,
    /// The checkpoint it resumed, if any.
    pub resumed_from: Option<PathBuf>,
    /// Newer checkpoints of the folder that did not load, each with its error (on the
    /// process that looked: rank 0 of a job). A caller warns about each: lost progress.
    pub skipped: Vec<Skipped>,
}

/// A training run that can be stepped, saved and resumed.
///
/// A data parallel rank implements every method as a collective where it must be one
/// (a step sums gradients; a save is written by rank 0 and confirmed to all); every
/// rank calls the same methods in the same order.
pub trait Run: TrainingRun + Sized {
    /// The run's errors; every model-level error converts into it.
    type Error: std::error::Error + From<NnError> + Send + Sync + 'static;

    /// Where the run executes: nothing for one process (`()`), the process group and
    /// reduce mode for a rank of a data parallel job.
    type Place;

    /// A fresh run at step 0, built from `config` alone.
    fn fresh(config: Self::Config, place: &Self::Place) -> Result<Self, Self::Error>;

    /// The run saved in `ck`, its configuration passed through `adjust` first (for what
    /// a resume may change: the device, the worker count, where a text now lies; see
    /// [`RunConfig::place`]). The next step is bit-identical to the one the saved run
    /// would have taken.
    fn from_checkpoint_in(
        ck: &Checkpoint,
        place: &Self::Place,
        adjust: &mut dyn FnMut(&mut Self::Config),
    ) -> Result<Self, Self::Error>;

    /// [`from_checkpoint_in`](Self::from_checkpoint_in) from a file. A data parallel
    /// run reads it on rank 0 and sends its bytes to every rank.
    fn resume_file(
        path: &Path,
        place: &Self::Place,
        adjust: &mut dyn FnMut(&mut Self::Config),
    ) -> Result<Self, Self::Error> {
        let ck = Checkpoint::load(path).map_err(NnError::from)?;
        Self::from_checkpoint_in(&ck, place, adjust)
    }

    /// The newest checkpoint in `dir` that loads, resumed; `None` when `dir` holds none.
    /// A data parallel run lets rank 0 decide and sends the bytes, so every rank
    /// resumes the same step.
    fn resume_newest(
        dir: &CheckpointDir,
        place: &Self::Place,
        adjust: &mut dyn FnMut(&mut Self::Config),
    ) -> Result<Option<Started<Self>>, Self::Error> {
        let Some(latest) = dir.latest().map_err(NnError::from)? else {
            return Ok(None);
        };
        let run = Self::from_checkpoint_in(&latest.checkpoint, place, adjust)?;
        Ok(Some(Started {
            run,
            resumed_from: Some(latest.path),
            skipped: latest.skipped,
        }))
    }

    /// One training step whose loss may stay on the device until
    /// [`read_losses`](Self::read_losses).
    fn step_deferred(&mut self) -> Result<(), Self::Error>;

    /// The losses of the steps run since the last read (oldest first), now appended to
    /// [`losses`](TrainingRun::losses). A run that stops on a non-finite loss errors
    /// here, naming the step.
    fn read_losses(&mut self) -> Result<&[f32], Self::Error>;

    /// Steps whose losses have not been read yet.
    fn unread_losses(&self) -> usize;

    /// One step, its loss read.
    fn step(&mut self) -> Result<f32, Self::Error> {
        self.step_deferred()?;
        let read = self.read_losses()?;
        read.last()
            .copied()
            .ok_or_else(|| NnError::invalid("Run::step", "the step ran but read no loss").into())
    }

    /// Runs the following steps as a replayed CUDA graph (`true`) or eagerly. Runs whose
    /// step a graph cannot hold refuse `true`; `false` always succeeds.
    fn set_cuda_graph(&mut self, on: bool) -> Result<(), Self::Error> {
        match on {
            false => Ok(()),
            true => Err(NnError::invalid(
                "Run::set_cuda_graph",
                "this kind of run cannot capture its step as a CUDA graph; train it eagerly",
            )
            .into()),
        }
    }

    /// Everything needed to continue (not a collective: the same on every rank).
    fn checkpoint(&self) -> Result<Checkpoint, Self::Error>;

    /// Writes [`checkpoint`](Self::checkpoint) to `path`, atomically (rank 0 writes,
    /// every rank learns whether that worked).
    fn save(&self, path: impl AsRef<Path>) -> Result<(), Self::Error> {
        self.save_with(path, &[])
    }

    /// [`save`](Self::save) with `metadata` (key, value) pairs added to the checkpoint,
    /// for what a binary records beside the run (`train_gpt`'s best validation loss).
    fn save_with(
        &self,
        path: impl AsRef<Path>,
        metadata: &[(&str, &str)],
    ) -> Result<(), Self::Error> {
        let mut ck = self.checkpoint()?;
        for (key, value) in metadata {
            ck.set_metadata(*key, *value).map_err(NnError::from)?;
        }
        ck.save(path).map_err(NnError::from)?;
        Ok(())
    }

    /// Saves this step's checkpoint in `dir` and prunes the oldest beyond its `keep`:
    /// what was written and removed (on rank 0; `None` on the other ranks).
    fn save_in(&self, dir: &CheckpointDir) -> Result<Option<Saved>, Self::Error> {
        let saved = dir.save(&self.checkpoint()?, self.step_count());
        Ok(Some(saved.map_err(NnError::from)?))
    }

    /// The model (the same on every rank).
    fn model(&self) -> &ModelOf<Self>;

    /// The model, mutably: to evaluate or sample from it between steps (a forward with
    /// `train = false` draws nothing and leaves the run unchanged).
    fn model_mut(&mut self) -> &mut ModelOf<Self>;

    /// This process's rank (0 for a single process): rank 0 prints and writes.
    fn rank(&self) -> usize {
        0
    }

    /// Where the steps happen, in words, for the line a binary prints first.
    fn placement(&self) -> String;
}

/// The `adjust` of a resume that moves the run to `device` and `num_workers` where given
/// and keeps the saved ones otherwise (neither changes a random stream; see
/// [`RunConfig::place`]).
pub fn placed<C: RunConfig>(
    device: Option<Device>,
    num_workers: Option<usize>,
) -> impl FnMut(&mut C) {
    move |config: &mut C| {
        let workers = num_workers.unwrap_or(config.num_workers());
        config.place(device.unwrap_or(config.device()), workers);
    }
}

/// Begins a run `how` says: fresh from the configuration `fresh` makes (its errors, and
/// the run's, are the caller's `E`), or resumed from
/// a checkpoint with its configuration passed through `adjust`. `Start::Latest` on a
/// folder with no checkpoint starts fresh. A fresh run seeds the process-wide default
/// generators with the run's seed first (as `torch.manual_seed` at the top of a
/// script): the run draws only from its own generators, but code around it that uses
/// the defaults is then reproducible too (a resume restores them from the checkpoint).
pub fn start<R: Run, E: From<R::Error>>(
    how: &Start,
    place: &R::Place,
    fresh: impl FnOnce() -> Result<R::Config, E>,
    mut adjust: impl FnMut(&mut R::Config),
) -> Result<Started<R>, E> {
    let resumed = match how {
        Start::Fresh => None,
        Start::File(path) => Some(Started {
            run: R::resume_file(path, place, &mut adjust)?,
            resumed_from: Some(path.clone()),
            skipped: Vec::new(),
        }),
        Start::Latest(dir) => R::resume_newest(dir, place, &mut adjust)?,
    };
    if let Some(started) = resumed {
        return Ok(started);
    }
    let config = fresh()?;
    rng_gen::manual_seed(config.seed());
    Ok(Started {
        run: R::fresh(config, place)?,
        resumed_from: None,
        skipped: Vec::new(),
    })
}
