//! A training run's state besides its model, owned, read, saved and restored in one
//! place for every training loop and every kind of run ([`RunConfig`]): the
//! single-process [`TrainLoop`](super::TrainLoop) and `distributed`'s data parallel
//! trainer, over the MLP of `train_resume` or the GPT of `train_gpt`.
//!
//! Both loops keep the same state next to their model (configuration, optimiser,
//! dropout generator, loader, step, loss history), answer the same questions about it
//! ([`TrainingRun`]: step count, losses, configuration), and must save it under the same
//! names and refuse the same inconsistencies on the way back; only where the model lives
//! (in the trainer, or inside a DDP wrapper) and which rows the loader loads (all of a
//! batch, or one rank's share) differ. So each trainer owns a [`RunState`] and lends it
//! its model to save ([`RunState::checkpoint`]) and to restore
//! ([`RunState::restore`]), and the rules exist once.

use rng_gen::{Generator, Key};
use tensor_core::{are_portable_arithmetic_enabled, DType, Device, Tensor};

use super::{RunConfig, TrainConfig};
use crate::checkpoint::default_cuda_rng_name;
pub use crate::checkpoint::run_entries::{
    ARITHMETIC_KEY, CONFIG_KEY, DROPOUT_RNG, LOADER, LOSSES, MODEL_KEY, OPTIM_PREFIX, STEP,
};
use crate::data::LoaderState;
use crate::{Checkpoint, CheckpointError, DataLoader, Module, NnError, Optimizer, Result};

/// Everything a training run keeps besides its model: the configuration it was built
/// from, the optimiser, the loader, the generator the dropout layers draw from, the
/// steps completed and their losses. Built at step 0 by [`FreshRun::new`](super::FreshRun::new);
/// read through [`TrainingRun`], which it implements too.
#[derive(Debug)]
pub struct RunState<C: RunConfig = TrainConfig> {
    config: C,
    optimizer: Optimizer,
    loader: DataLoader,
    dropout_generator: Generator,
    step: u64,
    /// Losses read to the host, one per step up to `step` minus the steps whose losses
    /// the trainer holds unread ([`Run::step_deferred`](super::Run::step_deferred)).
    losses: Vec<f32>,
}

impl<C: RunConfig> RunState<C> {
    /// A run at step 0 with these parts (what [`RunConfig::build`] returns, in a
    /// [`FreshRun`](super::FreshRun)).
    pub fn fresh(
        config: C,
        optimizer: Optimizer,
        loader: DataLoader,
        dropout_generator: Generator,
    ) -> Self {
        RunState {
            config,
            optimizer,
            loader,
            dropout_generator,
            step: 0,
            losses: Vec::new(),
        }
    }

    /// The loader, to take the next batch.
    pub fn loader_mut(&mut self) -> &mut DataLoader {
        &mut self.loader
    }

    /// The optimiser, to step the model.
    pub fn optimizer_mut(&mut self) -> &mut Optimizer {
        &mut self.optimizer
    }

    /// The optimiser.
    #[must_use]
    pub fn optimizer(&self) -> &Optimizer {
        &self.optimizer
    }

    /// Counts one more completed step (its loss is recorded by
    /// [`record_losses`](Self::record_losses), now or later).
    pub fn count_step(&mut self) {
        self.step += 1;
    }

    /// Appends the losses of the oldest steps whose losses were not recorded yet, and
    /// returns them.
    pub fn record_losses(&mut self, losses: impl IntoIterator<Item = f32>) -> &[f32] {
        let from = self.losses.len();
        self.losses.extend(losses);
        &self.losses[from..]
    }

    /// The checkpoint of the run with `model`: parameters (`model.*`), the optimiser and
    /// its state (`optim.*`), the dropout generator and the default generators of the devices in
    /// use (`rng.*`), the loader state in the run's terms (`loader.state`, with the
    /// configuration's batch size, so that a data parallel run of any world size can
    /// resume it), the step (`train.step`), the loss history (`train.loss_history`: the
    /// recorded losses, then `unread_losses`), the configuration (`train.config`) and
    /// the kind of model (`train.model`). Callers add their own metadata (a data
    /// parallel run adds its reduce mode).
    pub fn checkpoint(&self, model: &dyn Module, unread_losses: &[f32]) -> Result<Checkpoint> {
        let mut ck = Checkpoint::new();
        ck.put_module("model.", model)?;
        ck.put_optimizer(OPTIM_PREFIX, &self.optimizer)?;
        ck.put_generators(&[(DROPOUT_RNG, &self.dropout_generator)])?;
        ck.put_default_generators(&default_generator_devices(self.config.device()))?;
        let loader = LoaderState {
            batch_size: self.config.batch_size() as u64,
            ..self.loader.state()?
        };
        ck.insert_bytes(LOADER, &loader.to_bytes())?;
        ck.insert(
            STEP,
            &Tensor::from_vec(vec![self.step as i64], &[], Device::Cpu)?,
        )?;
        let losses = [&self.losses[..], unread_losses].concat();
        let count = losses.len();
        ck.insert(LOSSES, &Tensor::from_vec(losses, &[count], Device::Cpu)?)?;
        ck.set_metadata(CONFIG_KEY, self.config.to_json())?;
        ck.set_metadata(MODEL_KEY, C::MODEL_KIND)?;
        ck.set_metadata(
            ARITHMETIC_KEY,
            arithmetic_name(are_portable_arithmetic_enabled()),
        )?;
        Ok(ck)
    }

    /// Restores a freshly built run of the checkpoint's configuration (this state and
    /// its `model`) to where `ck` left it, given `ck`'s [`read_history`]. Checks first
    /// that the saved loader has this run's key and batch size and sits where the step
    /// leaves it, and that the optimiser is the saved one with the state the step
    /// leaves (SGD's momentum buffers, AdamW's moments); then restores parameters, the
    /// optimiser's state, the dropout generator, the default
    /// generators of the devices the run uses, the loader position (onto this loader's
    /// share of each batch), the step and the loss history. Nothing is changed if one of
    /// those checks fails.
    pub fn restore(
        &mut self,
        ck: &Checkpoint,
        model: &mut dyn Module,
        (step, losses): (u64, Vec<f32>),
    ) -> Result<()> {
        let saved = ck.loader_state(LOADER)?;
        check_loader_state(&saved, ExpectedLoader::of_run(self), step)?;
        let names: Vec<String> = model
            .named_parameters()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        ck.check_optimizer_state(OPTIM_PREFIX, &self.optimizer, &names, step)?;
        ck.restore_module("model.", model)?;
        ck.restore_optimizer(OPTIM_PREFIX, &mut self.optimizer, model)?;
        ck.restore_generators(&[(DROPOUT_RNG, &self.dropout_generator)])?;
        restore_default_generators(ck, self.config.device())?;
        // Saved in the run's terms; this loader may load one rank's share of a batch.
        let mine = LoaderState {
            batch_size: self.loader.state()?.batch_size,
            ..saved
        };
        self.loader
            .set_state(&mine)
            .map_err(|e| CheckpointError::loader(LOADER, e))?;
        self.step = step;
        self.losses = losses;
        Ok(())
    }
}

/// What a caller can read of a training run, the same for every trainer (in scope with
/// `use nn_mini::train::TrainingRun`): each trainer only says where its [`RunState`] is.
pub trait TrainingRun {
    /// The kind of run: its configuration.
    type Config: RunConfig;

    /// The run's state besides its model.
    fn run_state(&self) -> &RunState<Self::Config>;

    /// Steps completed.
    #[must_use]
    fn step_count(&self) -> u64 {
        self.run_state().step
    }

    /// The loss of every step so far whose loss was read to the host (restored steps
    /// included); `losses()[k]` is the loss of step `k + 1`. A trainer that defers
    /// reading losses ([`Run::step_deferred`](super::Run::step_deferred)) adds
    /// them when it reads them.
    #[must_use]
    fn losses(&self) -> &[f32] {
        &self.run_state().losses
    }

    /// The run's configuration (for a data parallel run, `batch_size` is the global
    /// batch).
    #[must_use]
    fn config(&self) -> &Self::Config {
        &self.run_state().config
    }

    /// The data loader (e.g. to read its epoch and position; a data parallel rank's
    /// loads that rank's share, at the run's epoch and position).
    #[must_use]
    fn loader(&self) -> &DataLoader {
        &self.run_state().loader
    }

    /// The generator the dropout layers draw from (in lockstep on every rank of a data
    /// parallel run).
    #[must_use]
    fn dropout_generator(&self) -> &Generator {
        &self.run_state().dropout_generator
    }
}

impl<C: RunConfig> TrainingRun for RunState<C> {
    type Config = C;

    fn run_state(&self) -> &RunState<C> {
        self
    }
}

/// The configuration stored in a checkpoint, after checking that it is a checkpoint of
/// this kind of run (`train.model`; [`CheckpointError::KindMismatch`] naming both
/// kinds otherwise).
pub fn config_of<C: RunConfig>(ck: &Checkpoint) -> Result<C> {
    check_model_kind::<C>(ck)?;
    C::from_json(ck.require_metadata(CONFIG_KEY)?)
}

/// Errors unless `ck` holds a run of `C`'s kind of model (one without `train.model`
/// holds the MLP, the only model then).
pub fn check_model_kind<C: RunConfig>(ck: &Checkpoint) -> Result<()> {
    let saved = ck.metadata(MODEL_KEY).unwrap_or(TrainConfig::MODEL_KIND);
    if saved != C::MODEL_KIND {
        return Err(CheckpointError::KindMismatch {
            name: MODEL_KEY.into(),
            what: "model",
            saved: saved.to_string(),
            expected: C::MODEL_KIND.to_string(),
        }
        .into());
    }
    Ok(())
}

/// The step count and loss history of `ck`, after checking what can be checked before
/// anything is built: the model tensors' shapes against `config` (so an edited
/// configuration cannot make the caller allocate a huge model), a non-negative step,
/// and one loss per step.
pub fn read_history<C: RunConfig>(ck: &Checkpoint, config: &C) -> Result<(u64, Vec<f32>)> {
    check_model_kind::<C>(ck)?;
    check_model_shapes(ck, config)?;
    check_arithmetic(ck)?;
    let step = ck.tensor_like(STEP, &[], DType::I64)?.to_scalar::<i64>()?;
    let step =
        u64::try_from(step).map_err(|_| invalid_entry(STEP, format!("negative step {step}")))?;
    let losses = ck.tensor(LOSSES)?;
    let losses = ck
        .tensor_like(LOSSES, &[losses.elem_count()], DType::F32)?
        .to_vec::<f32>()?;
    if losses.len() as u64 != step {
        return Err(
            invalid_entry(LOSSES, format!("{} losses for {step} steps", losses.len())).into(),
        );
    }
    Ok((step, losses))
}

fn arithmetic_name(portable: bool) -> &'static str {
    if portable {
        "portable"
    } else {
        "default"
    }
}

/// A run resumes under the arithmetic it was saved with: portable arithmetic changes
/// the bits of every matmul, `exp` and `log`, so resuming a portable run without it (or
/// the reverse) would continue another curve without a word.
pub fn check_arithmetic(ck: &Checkpoint) -> Result<()> {
    let Some(saved) = ck.metadata(ARITHMETIC_KEY) else {
        return Ok(());
    };
    let saved = match saved {
        "portable" => true,
        "default" => false,
        other => {
            return Err(invalid_entry(
                ARITHMETIC_KEY,
                format!("{other:?}; expected \"portable\" or \"default\""),
            )
            .into())
        }
    };
    let current = are_portable_arithmetic_enabled();
    if saved != current {
        return Err(NnError::ArithmeticMismatch { saved, current });
    }
    Ok(())
}

/// The `model.*` tensors must be exactly the configuration's parameters, shape for
/// shape: checked on the checkpoint's own tensors before the model is built, so a
/// configuration edited to describe a huge model fails here instead of allocating.
/// (Public so that other training loops over the same model, like `distributed`'s, check
/// their checkpoints the same way.)
pub fn check_model_shapes<C: RunConfig>(ck: &Checkpoint, config: &C) -> Result<()> {
    config.validate()?;
    let expected = config.parameter_shapes();
    for (name, dims) in &expected {
        ck.tensor_like(&format!("model.{name}"), dims, DType::F32)?;
    }
    let stored = ck.names().filter(|n| n.starts_with("model.")).count();
    if stored != expected.len() {
        return Err(CheckpointError::Inconsistent {
            name: CONFIG_KEY.into(),
            reason: format!(
                "the configuration makes {} parameter tensors, the checkpoint holds {stored} model.* tensors",
                expected.len()
            ),
        }
        .into());
    }
    Ok(())
}

/// Restores the CPU's default generator and, on a CUDA run, the default generator of the
/// GPU this run drives. A checkpoint written on one GPU holds one GPU entry,
/// `rng.default.cuda:<i>` for the GPU it was written from; the resuming run may drive
/// another (a single-process run moved to cuda:1, or rank 1 of a data parallel job on
/// cuda:1 resuming what rank 0 wrote from cuda:0), so a checkpoint with exactly one GPU
/// entry restores it on whichever GPU this run drives, and one with none (a CPU run
/// resumed on a GPU) restores the CPU's alone. One with several must hold this GPU's
/// own. Everything is read and checked before any generator changes.
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
        // None: a run moved to a GPU from the CPU (portable arithmetic keeps its curve,
        // docs/contract.md §14). The GPU's generator keeps its state; the loop never
        // draws from it.
        [] => return Ok(ck.restore_default_generators(&[Device::Cpu])?),
        several => {
            return Err(CheckpointError::Inconsistent {
                name: own,
                reason: format!(
                    "the checkpoint has GPU generators {several:?} but none for cuda:{ordinal}"
                ),
            }
            .into())
        }
    };
    let key = {
        let scratch = Generator::new(Device::Cpu);
        scratch
            .set_state(&ck.bytes(&name)?)
            .map_err(|e| CheckpointError::Inconsistent {
                name: name.clone(),
                reason: e.to_string(),
            })?;
        scratch.key()
    };
    let gpu = rng_gen::default_generator(device).map_err(|e| CheckpointError::Inconsistent {
        name: own.clone(),
        reason: e.to_string(),
    })?;
    ck.restore_default_generators(&[Device::Cpu])?;
    gpu.set_key(key);
    Ok(())
}

/// The devices whose default generators a checkpoint carries: the CPU always, and the
/// run's GPU on a CUDA run. The loops never draw from them; they are saved so that
/// code around a loop which does (like a script after `torch.manual_seed`) resumes
/// reproducibly too.
#[must_use]
pub fn default_generator_devices(device: Device) -> Vec<Device> {
    match device {
        Device::Cpu => vec![Device::Cpu],
        gpu => vec![Device::Cpu, gpu],
    }
}

/// What a saved loader state must match: the key the run's seed derives, the run's
/// batch size (the global batch for a data parallel run), and the batches per epoch.
#[derive(Clone, Copy, Debug)]
struct ExpectedLoader {
    /// The key a fresh loader of this run has.
    pub key: Key,
    /// The run's (global) batch size.
    pub batch_size: u64,
    /// Batches per epoch at that batch size.
    pub per_epoch: u64,
    /// The configuration's seed, to name in the message.
    pub seed: u64,
}

impl ExpectedLoader {
    /// What a freshly built `run` expects of a saved loader state: the key and the
    /// batches per epoch of its loader, and the configuration's batch size, which for a
    /// data parallel run (whose loader loads one rank's share) is the global batch, the
    /// size its checkpoint stores.
    fn of_run<C: RunConfig>(run: &RunState<C>) -> Self {
        ExpectedLoader {
            key: run.loader.key(),
            batch_size: run.config.batch_size() as u64,
            per_epoch: run.loader.batches_per_epoch() as u64,
            seed: run.config.seed(),
        }
    }
}

/// A saved loader of this run has this run's key and batch size, and sits where
/// `step` batches from the start leave it.
fn check_loader_state(saved: &LoaderState, expected: ExpectedLoader, step: u64) -> Result<()> {
    let inconsistent = |reason: String| CheckpointError::Inconsistent {
        name: LOADER.into(),
        reason,
    };
    if saved.key != expected.key || saved.batch_size != expected.batch_size {
        return Err(inconsistent(format!(
            "its key {:?} and batch size {} are not the key {:?} that the configuration's \
             seed {} derives and the run's batch size {}: the loader state belongs to another run",
            saved.key, saved.batch_size, expected.key, expected.seed, expected.batch_size
        ))
        .into());
    }
    let per_epoch = expected.per_epoch;
    let (epoch, position) = (step / per_epoch, step % per_epoch);
    if (saved.epoch, saved.position) != (epoch, position) {
        return Err(inconsistent(format!(
            "it is at epoch {}, batch {}, but after {step} steps of {per_epoch} batches \
             per epoch the loader is at epoch {epoch}, batch {position}",
            saved.epoch, saved.position
        ))
        .into());
    }
    Ok(())
}

/// An [`CheckpointError::InvalidEntry`].
fn invalid_entry(name: &str, reason: String) -> CheckpointError {
    CheckpointError::InvalidEntry {
        name: name.into(),
        reason,
    }
}
