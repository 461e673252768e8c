//! The run `train_gpt` trains: one process (`GptTrainer`) or one rank of a data parallel
//! job (`GptDdpTrainer`), started fresh from the flags or resumed from a checkpoint,
//! behind the few calls the loop in `main` makes.

use std::error::Error;
use std::path::Path;
use std::sync::Arc;

use distributed::{GptDdpTrainer, ProcessGroup};
use nn_mini::gpt::{DataSpec, Gpt, GptTrainConfig, GptTrainer, Text};
use nn_mini::train::TrainingRun;
use nn_mini::Checkpoint;

use super::args::Args;
use crate::common::flags::check_same;

/// A GPT run in one process or on one rank.
pub enum Session {
    /// One process on `--device`.
    Single(GptTrainer),
    /// One rank of a data parallel job.
    Ranks(GptDdpTrainer),
}

impl Session {
    /// A fresh run from the flags, or the run saved in `--resume` (whose settings come
    /// from the checkpoint; flags may only repeat them, move it to another device or
    /// worker count, or say where its text is now).
    pub fn start(
        args: &Args,
        group: Option<Arc<dyn ProcessGroup>>,
    ) -> Result<Self, Box<dyn Error>> {
        let flags = &args.run;
        let Some(path) = &flags.resume else {
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
            let config = args.train_config(data, device, flags.steps.unwrap_or(200));
            // Like torch.manual_seed: the loop draws from its own generators, but code
            // around it that uses the default generator is reproducible too.
            rng_gen::manual_seed(config.seed);
            return Ok(match group {
                None => Session::Single(GptTrainer::new(config)?),
                Some(group) => Session::Ranks(GptDdpTrainer::new(config, args.ddp.mode(), group)?),
            });
        };
        let cannot =
            |e: &dyn std::fmt::Display| format!("cannot resume from {}: {e}", path.display());
        let workers = flags.workers;
        let data = args.data.as_ref().map(|d| d.display().to_string());
        let adjust = |config: &mut GptTrainConfig| {
            config.num_workers = workers.unwrap_or(config.num_workers);
            if let Some(data) = &data {
                config.data.path.clone_from(data);
            }
        };
        let session = match group {
            None => {
                let ck = Checkpoint::load(path).map_err(|e| cannot(&e))?;
                let device = args.device;
                Session::Single(
                    GptTrainer::from_checkpoint_with(&ck, |config| {
                        adjust(config);
                        config.device = device.unwrap_or(config.device);
                    })
                    .map_err(|e| cannot(&e))?,
                )
            }
            Some(group) => {
                let run =
                    GptDdpTrainer::resume_with(path, group, adjust).map_err(|e| cannot(&e))?;
                args.ddp.check_resumed_mode::<Args>(run.mode())?;
                Session::Ranks(run)
            }
        };
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
        Ok(session)
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
