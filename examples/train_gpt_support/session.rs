//! The run `train_gpt` trains: one process (`GptTrainer`) or one rank of a data parallel
//! job (`GptDdpTrainer`), started fresh from the flags or resumed from a checkpoint,
//! behind the few calls the loop in `main` makes.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use distributed::{GptDdpTrainer, ProcessGroup};
use nn_mini::checkpoint::{CheckpointDir, Saved};
use nn_mini::gpt::{DataSpec, Gpt, GptTrainConfig, GptTrainer, Text};
use nn_mini::train::TrainingRun;
use nn_mini::Checkpoint;

use super::args::Args;
use crate::common::elastic;
use crate::common::flags::check_same;

/// The error of a resume from `path` that failed.
fn cannot(path: &Path, e: &dyn std::fmt::Display) -> String {
    format!("cannot resume from {}: {e}", path.display())
}

/// A GPT run in one process or on one rank.
pub enum Session {
    /// One process on `--device`.
    Single(GptTrainer),
    /// One rank of a data parallel job.
    Ranks(GptDdpTrainer),
}

impl Session {
    /// A fresh run from the flags, or a saved one: the checkpoint `--resume` names, or
    /// with `--resume-latest` the newest in `dir` (`--checkpoint-dir`) that loads (none
    /// there: a first start). A resumed run's settings come from its checkpoint; flags
    /// may only repeat them, move it to another device or worker count, or say where its
    /// text is now. Returns the run and the checkpoint it resumed, if any.
    pub fn start(
        args: &Args,
        group: Option<Arc<dyn ProcessGroup>>,
        dir: Option<&CheckpointDir>,
    ) -> Result<(Self, Option<PathBuf>), Box<dyn Error>> {
        let flags = &args.run;
        let latest = dir.filter(|_| flags.resume_latest && flags.resume.is_none());
        let workers = flags.workers;
        let data = args.data.as_ref().map(|d| d.display().to_string());
        let adjust = |config: &mut GptTrainConfig| {
            config.num_workers = workers.unwrap_or(config.num_workers);
            if let Some(data) = &data {
                config.data.path.clone_from(data);
            }
        };
        let resumed = match (&group, &flags.resume, latest) {
            (None, Some(path), _) => {
                let ck = Checkpoint::load(path).map_err(|e| cannot(path, &e))?;
                Some((Session::single_from(&ck, args, adjust, path)?, path.clone()))
            }
            (None, None, Some(dir)) => match dir.latest()? {
                None => None,
                Some(latest) => {
                    elastic::warn_skipped(&latest.skipped);
                    let ck = &latest.checkpoint;
                    let session = Session::single_from(ck, args, adjust, &latest.path)?;
                    Some((session, latest.path))
                }
            },
            (Some(group), Some(path), _) => {
                let run = GptDdpTrainer::resume_with(path, group.clone(), adjust)
                    .map_err(|e| cannot(path, &e))?;
                Some((Session::Ranks(run), path.clone()))
            }
            (Some(group), None, Some(dir)) => {
                GptDdpTrainer::resume_latest_with(dir, group.clone(), adjust)?.map(|latest| {
                    elastic::warn_skipped(&latest.skipped);
                    (Session::Ranks(latest.trainer), latest.path)
                })
            }
            (_, None, None) => None,
        };
        // No checkpoint to resume (with --resume-latest: the job's first start).
        let Some((session, path)) = resumed else {
            return Ok((Session::fresh(args, group)?, None));
        };
        if let Session::Ranks(run) = &session {
            args.ddp.check_resumed_mode::<Args>(run.mode())?;
        }
        let saved = session.config();
        check_same::<Args, _>("--seed", flags.seed, saved.seed)?;
        check_same::<Args, _>("--batch-size", flags.batch_size, saved.batch_size)?;
        if session.rank() == 0 {
            println!(
                "resumed {} at step {} (epoch {}, batch {} of the epoch)",
                path.display(),
                session.step_count(),
                session.epoch_position().0,
                session.epoch_position().1
            );
        }
        Ok((session, Some(path)))
    }

    /// A fresh run from the flags, on one process or on this rank of `group`.
    fn fresh(args: &Args, group: Option<Arc<dyn ProcessGroup>>) -> Result<Self, Box<dyn Error>> {
        let text = Text::read(args.data_path())?;
        let data = DataSpec {
            path: args.data_path().display().to_string(),
            len: text.bytes().len() as u64,
            sha256: text.sha256().to_string(),
        };
        let device = match &group {
            Some(group) => group.device(),
            None => args.device.unwrap_or_default(),
        };
        let config = args.train_config(data, device, args.run.steps.unwrap_or(200));
        // Like torch.manual_seed: the loop draws from its own generators, but code
        // around it that uses the default generator is reproducible too.
        rng_gen::manual_seed(config.seed);
        Ok(match group {
            None => Session::Single(GptTrainer::new(config)?),
            Some(group) => Session::Ranks(GptDdpTrainer::new(config, args.ddp.mode(), group)?),
        })
    }

    /// The single-process run saved in `ck` (read from `path`), its configuration
    /// passed through `adjust` and moved to `--device` when given.
    fn single_from(
        ck: &Checkpoint,
        args: &Args,
        adjust: impl FnOnce(&mut GptTrainConfig),
        path: &Path,
    ) -> Result<Self, Box<dyn Error>> {
        let device = args.device;
        let run = GptTrainer::from_checkpoint_with(ck, |config| {
            adjust(config);
            config.device = device.unwrap_or(config.device);
        })
        .map_err(|e| cannot(path, &e))?;
        Ok(Session::Single(run))
    }

    /// One training step; its loss (the global batch's, on every rank).
    pub fn step(&mut self) -> Result<f32, Box<dyn Error>> {
        Ok(match self {
            Session::Single(run) => run.step()?,
            Session::Ranks(run) => run.step()?,
        })
    }

    /// Writes the checkpoint (rank 0 writes, every rank learns whether it worked).
    pub fn save(&self, path: &Path) -> Result<(), Box<dyn Error>> {
        match self {
            Session::Single(run) => run.save(path)?,
            Session::Ranks(run) => run.save(path)?,
        }
        Ok(())
    }

    /// Saves this step's checkpoint in `dir` (rank 0 writes and prunes, every rank
    /// learns whether it worked): what was written and removed, on rank 0.
    pub fn save_in(&self, dir: &CheckpointDir) -> Result<Option<Saved>, Box<dyn Error>> {
        Ok(match self {
            Session::Single(run) => Some(dir.save(&run.checkpoint()?, run.step_count())?),
            Session::Ranks(run) => run.save_in(dir)?,
        })
    }

    /// Steps completed.
    pub fn step_count(&self) -> u64 {
        self.run().step_count()
    }

    /// Every step's loss so far, restored steps included.
    pub fn losses(&self) -> &[f32] {
        self.run().losses()
    }

    /// The run's configuration.
    pub fn config(&self) -> &GptTrainConfig {
        self.run().config()
    }

    /// The model (the same on every rank), for evaluation and sampling.
    pub fn model_mut(&mut self) -> &mut Gpt {
        match self {
            Session::Single(run) => run.model_mut(),
            Session::Ranks(run) => run.model_mut(),
        }
    }

    /// This process's rank (0 for a single process).
    pub fn rank(&self) -> usize {
        match self {
            Session::Single(_) => 0,
            Session::Ranks(run) => run.group().rank(),
        }
    }

    /// Where the run's steps happen, for the first line it prints.
    pub fn placement(&self) -> String {
        match self {
            Session::Single(run) => {
                let device = run.config().device;
                match device {
                    tensor_core::Device::Cuda(ordinal) => {
                        // The driver's name, so that a run on the host-executed CUDA
                        // stand-in (docs/cuda-standin.md) never passes for a GPU run.
                        let name = tensor_core::cuda::get_device_name(ordinal)
                            .unwrap_or_else(|e| e.to_string());
                        format!("{device}: {name}")
                    }
                    cpu => cpu.to_string(),
                }
            }
            Session::Ranks(run) => format!(
                "{} rank(s) on {} | {}",
                run.group().world_size(),
                run.group().backend(),
                run.mode()
            ),
        }
    }

    /// The loader's epoch and position within it.
    fn epoch_position(&self) -> (u64, u64) {
        let loader = self.run().loader();
        (loader.epoch(), loader.position())
    }

    fn run(&self) -> &dyn TrainingRun<Config = GptTrainConfig> {
        match self {
            Session::Single(run) => run,
            Session::Ranks(run) => run,
        }
    }
}
