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

use nn_mini::checkpoint::default_cuda_rng_name;
use nn_mini::data::LoaderState;
use nn_mini::train::{
    check_model_shapes, TrainConfig, CONFIG_KEY, DROPOUT_RNG, LOADER, LOSSES, STEP,
};
use nn_mini::{Checkpoint, CheckpointError, Module};
use tensor_core::{DType, Device, Tensor};

use super::DdpTrainer;
use crate::{DistError, ProcessGroup, ReduceMode, Result};

/// Metadata key of the reduce mode (`fast` or `invariant:<shards>`).
pub const MODE_KEY: &str = "ddp.mode";
/// Metadata key of the world size that wrote the checkpoint (informational).
pub const WORLD_SIZE_KEY: &str = "ddp.world_size";

fn inconsistent(name: &str, reason: String) -> DistError {
    DistError::Nn(
        CheckpointError::Inconsistent {
            name: name.into(),
            reason,
        }
        .into(),
    )
}

/// Restores the CPU's default generator and this rank's GPU's. The GPU entry is the one
/// rank 0 saved, `rng.default.cuda:<rank 0's LOCAL_RANK>`: the default generators are
/// identical on every rank, but in the resuming job this rank may drive another GPU
/// (rank 1 on cuda:1 resuming a checkpoint written from cuda:0), so a checkpoint with one
/// GPU entry restores it on whichever GPU this rank drives. One with several (not
/// written by this trainer) must hold this rank's own. Everything is validated before any
/// generator changes.
fn restore_default_generators(ck: &Checkpoint, device: Device) -> Result<()> {
    let Device::Cuda(ordinal) = device else {
        return Ok(ck.restore_default_generators(&[Device::Cpu])?);
    };
    let own = default_cuda_rng_name(ordinal);
    let saved: Vec<&str> = ck
        .names()
        .filter(|name| {
            // `default_cuda_rng_name(i)` for some ordinal i.
            name.rsplit_once(':').is_some_and(|(_, i)| {
                i.parse::<usize>()
                    .is_ok_and(|i| default_cuda_rng_name(i) == *name)
            })
        })
        .collect();
    let name = match saved.as_slice() {
        [one] => (*one).to_string(),
        _ if saved.contains(&own.as_str()) => own.clone(),
        // None: the checkpoint's own error names the missing entry.
        [] => return Ok(ck.restore_default_generators(&[Device::Cpu, device])?),
        several => {
            return Err(inconsistent(
                &own,
                format!(
                    "the checkpoint has GPU generators {several:?} but none for cuda:{ordinal}"
                ),
            ))
        }
    };
    let key = {
        let scratch = rng_gen::Generator::new(Device::Cpu);
        scratch
            .set_state(&ck.bytes(&name)?)
            .map_err(|e| inconsistent(&name, e.to_string()))?;
        scratch.key()
    };
    let gpu = rng_gen::default_generator(device).map_err(|e| inconsistent(&own, e.to_string()))?;
    ck.restore_default_generators(&[Device::Cpu])?;
    gpu.set_key(key);
    Ok(())
}

impl DdpTrainer {
    /// Everything needed to continue on any rank. The same on every rank; not a
    /// collective.
    pub fn checkpoint(&self) -> Result<Checkpoint> {
        let mut ck = Checkpoint::new();
        ck.put_module("model.", self.ddp.module())?;
        ck.put_sgd("optim.", &self.optimizer)?;
        ck.put_generators(&[(DROPOUT_RNG, &self.dropout_generator)])?;
        ck.put_default_generators(&self.default_generator_devices())?;
        let global = LoaderState {
            batch_size: self.config.batch_size as u64,
            ..self.loader.state()?
        };
        ck.insert_bytes(LOADER, &global.to_bytes())?;
        ck.insert(
            STEP,
            &Tensor::from_vec(vec![self.step as i64], &[], Device::Cpu)?,
        )?;
        ck.insert(
            LOSSES,
            &Tensor::from_slice(&self.losses, &[self.losses.len()], Device::Cpu)?,
        )?;
        ck.set_metadata(CONFIG_KEY, self.config.to_json())?;
        ck.set_metadata(MODE_KEY, self.mode.to_string())?;
        ck.set_metadata(WORLD_SIZE_KEY, self.ddp.group().world_size().to_string())?;
        Ok(ck)
    }

    /// Writes [`checkpoint`](Self::checkpoint) to `path` (atomically, from rank 0 only)
    /// and tells every rank whether that worked. A collective.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let group = self.ddp.group();
        let written = match group.rank() {
            0 => self.checkpoint().and_then(|ck| Ok(ck.save(path.as_ref())?)),
            _ => Ok(()),
        };
        let mut flag = Tensor::from_vec(vec![i64::from(written.is_ok())], &[1], Device::Cpu)?
            .to_device(group.device())?;
        group.broadcast(&mut flag, 0)?;
        written?;
        if flag.to_vec::<i64>()?[0] != 1 {
            return Err(DistError::RemoteFailure {
                rank: 0,
                message: format!("could not write the checkpoint {}", path.as_ref().display()),
            });
        }
        Ok(())
    }

    /// The configuration and reduce mode stored in a checkpoint.
    pub fn config_of(ck: &Checkpoint) -> Result<(TrainConfig, ReduceMode)> {
        let config = TrainConfig::from_json(ck.require_metadata(CONFIG_KEY)?)?;
        let mode = ck.require_metadata(MODE_KEY)?.parse()?;
        Ok((config, mode))
    }

    /// Rank 0 reads `path` and sends its bytes to every rank, which all rebuild the run
    /// with [`from_checkpoint`](Self::from_checkpoint). A collective; the file needs to
    /// exist on rank 0's machine only.
    pub fn resume(
        path: impl AsRef<Path>,
        group: Arc<dyn ProcessGroup>,
        num_workers: Option<usize>,
    ) -> Result<Self> {
        let bytes = broadcast_file(&*group, path.as_ref())?;
        let ck = Checkpoint::from_bytes(&bytes)?;
        DdpTrainer::from_checkpoint(&ck, group, num_workers)
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
        let (mut config, mode) = DdpTrainer::config_of(ck)?;
        config.num_workers = num_workers.unwrap_or(config.num_workers);
        config.device = group.device();
        check_model_shapes(ck, &config)?;
        let step = ck.tensor_like(STEP, &[], DType::I64)?.to_scalar::<i64>()?;
        let step =
            u64::try_from(step).map_err(|_| inconsistent(STEP, format!("negative step {step}")))?;
        let losses = ck.tensor(LOSSES)?;
        let losses = ck
            .tensor_like(LOSSES, &[losses.elem_count()], DType::F32)?
            .to_vec::<f32>()?;
        if losses.len() as u64 != step {
            return Err(inconsistent(
                LOSSES,
                format!("{} losses for {step} steps", losses.len()),
            ));
        }
        let mut trainer = DdpTrainer::new(config, mode, group)?;
        let saved = ck.loader_state(LOADER)?;
        trainer.check_loader_state(&saved, step)?;
        ck.restore_module("model.", trainer.ddp.module_mut())?;
        ck.restore_sgd("optim.", &mut trainer.optimizer, trainer.ddp.module())?;
        trainer.check_momentum_buffers(step)?;
        ck.restore_generators(&[(DROPOUT_RNG, &trainer.dropout_generator)])?;
        restore_default_generators(ck, trainer.config.device)?;
        let local = LoaderState {
            epoch: saved.epoch,
            position: saved.position,
            ..trainer.loader.state()?
        };
        trainer.loader.set_state(&local)?;
        trainer.step = step;
        trainer.losses = losses;
        Ok(trainer)
    }

    /// The devices whose default generators a checkpoint carries (as the single-process
    /// trainer: the CPU, and the run's GPU).
    fn default_generator_devices(&self) -> Vec<Device> {
        match self.config.device {
            Device::Cpu => vec![Device::Cpu],
            gpu => vec![Device::Cpu, gpu],
        }
    }

    /// The saved loader belongs to this run (same key, same global batch) and sits where
    /// `step` global batches leave it.
    fn check_loader_state(&self, saved: &LoaderState, step: u64) -> Result<()> {
        let expected = self.loader.key();
        if saved.key != expected || saved.batch_size != self.config.batch_size as u64 {
            return Err(inconsistent(
                LOADER,
                format!(
                    "key {:?} and batch {} are not this run's key {expected:?} and global batch {}",
                    saved.key, saved.batch_size, self.config.batch_size
                ),
            ));
        }
        let per_epoch = self.loader.batches_per_epoch() as u64;
        if (saved.epoch, saved.position) != (step / per_epoch, step % per_epoch) {
            return Err(inconsistent(
                LOADER,
                format!(
                    "it is at epoch {}, batch {}, but {step} steps of {per_epoch} batches per epoch end at epoch {}, batch {}",
                    saved.epoch,
                    saved.position,
                    step / per_epoch,
                    step % per_epoch
                ),
            ));
        }
        Ok(())
    }

    /// After a step with momentum every parameter has a buffer; before it none has.
    fn check_momentum_buffers(&self, step: u64) -> Result<()> {
        let buffers = self.optimizer.momentum_buffers().len();
        let expected = if step > 0 && self.config.momentum != 0.0 {
            self.ddp.module().parameters().len()
        } else {
            0
        };
        if buffers != expected {
            return Err(inconsistent(
                "optim.momentum_buffers",
                format!(
                    "{buffers} momentum buffers after {step} steps; the model needs {expected}"
                ),
            ));
        }
        Ok(())
    }
}

/// Rank 0's bytes of `path`, on every rank (a length, then the bytes; a length of -1
/// says rank 0 could not read the file, and every rank errors).
fn broadcast_file(group: &dyn ProcessGroup, path: &Path) -> Result<Vec<u8>> {
    let device = group.device();
    let read = match group.rank() {
        0 => std::fs::read(path).map_err(|source| DistError::Io {
            context: format!("reading the checkpoint {}", path.display()),
            source,
        }),
        _ => Ok(Vec::new()),
    };
    let len = read.as_ref().map_or(-1, |b| b.len() as i64);
    let mut header = Tensor::from_vec(vec![len], &[1], Device::Cpu)?.to_device(device)?;
    group.broadcast(&mut header, 0)?;
    let len = header.to_vec::<i64>()?[0];
    let bytes = read?;
    let len = usize::try_from(len).map_err(|_| DistError::RemoteFailure {
        rank: 0,
        message: format!("could not read the checkpoint {}", path.display()),
    })?;
    let mine = if group.rank() == 0 {
        bytes
    } else {
        vec![0u8; len]
    };
    let mut data = Tensor::from_vec(mine, &[len], Device::Cpu)?.to_device(device)?;
    group.broadcast(&mut data, 0)?;
    Ok(data.to_vec::<u8>()?)
}
