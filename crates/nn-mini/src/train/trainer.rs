//! `Trainer`: the training loop of `examples/train_resume.rs`, resumable bit for bit.

use std::path::Path;
use std::sync::Arc;

use rng_gen::{fold_in, Generator, Key};
use tensor_core::{DType, Device, Tensor};

use super::{GaussianClusters, TrainConfig};
use crate::data::LoaderState;
use crate::{
    cross_entropy, Checkpoint, CheckpointError, DataLoader, Dropout, Linear, Module, ReLU, Result,
    Sequential, Sgd, SgdConfig,
};

/// Sub-key of the run key for the weight initialisation generator.
pub const INIT_DOMAIN: u64 = 0;
/// Sub-key of the run key for the dropout generator.
pub const DROPOUT_DOMAIN: u64 = 1;
/// Sub-key of the run key for the data loader.
pub const LOADER_DOMAIN: u64 = 2;
/// Sub-key of the run key for the synthetic dataset.
pub const DATA_DOMAIN: u64 = 3;

/// Checkpoint metadata key of the run's [`TrainConfig`] (JSON).
pub const CONFIG_KEY: &str = "train.config";
/// Checkpoint entry of the step count (i64 scalar).
pub const STEP: &str = "train.step";
/// Checkpoint entry of the loss history (f32, one per step).
pub const LOSSES: &str = "train.loss_history";
/// Checkpoint entry of the loader state.
pub const LOADER: &str = "loader.state";
/// Checkpoint name of the dropout generator (stored as `rng.dropout`).
pub const DROPOUT_RNG: &str = "dropout";

/// A whole training run: model, optimiser, data loader, dropout generator, step counter
/// and loss history. [`step`](Self::step) runs one SGD step; [`checkpoint`](Self::checkpoint)
/// captures all of it; [`from_checkpoint`](Self::from_checkpoint) rebuilds a trainer whose
/// next step is bit-identical to the one the saved trainer would have run.
pub struct Trainer {
    config: TrainConfig,
    model: Sequential,
    optimizer: Sgd,
    loader: DataLoader,
    dropout_generator: Generator,
    step: u64,
    losses: Vec<f32>,
}

impl std::fmt::Debug for Trainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("config", &self.config)
            .field("step", &self.step)
            .finish()
    }
}

impl Trainer {
    /// A fresh run at step 0. Draws only from generators derived from `config.seed`
    /// (never from the process-wide default generators), so two trainers in one process
    /// do not disturb each other.
    pub fn new(config: TrainConfig) -> Result<Self> {
        config.validate()?;
        let run = Key::new(config.seed);
        let device = config.device;
        let init = Generator::from_key(device, fold_in(run, INIT_DOMAIN));
        let dropout_generator = Generator::from_key(device, fold_in(run, DROPOUT_DOMAIN));
        let model = build_mlp(&config.layers, config.dropout, &init, &dropout_generator)?;
        let optimizer = Sgd::new(
            SgdConfig::new(config.lr)
                .momentum(config.momentum)
                .weight_decay(config.weight_decay),
        )?;
        let classes = *config
            .layers
            .last()
            .expect("validated: at least two widths");
        let dataset = GaussianClusters::new(
            fold_in(run, DATA_DOMAIN),
            config.dataset_size,
            config.layers[0],
            classes,
        )?;
        let loader = DataLoader::builder(Arc::new(dataset))
            .batch_size(config.batch_size)
            .shuffle(true)
            .num_workers(config.num_workers)
            .key(fold_in(run, LOADER_DOMAIN))
            .build()?;
        Ok(Trainer {
            config,
            model,
            optimizer,
            loader,
            dropout_generator,
            step: 0,
            losses: Vec::new(),
        })
    }

    /// One step: next batch, forward (dropout on), cross-entropy, backward, SGD update.
    /// Returns the batch loss, which is also appended to the history.
    pub fn step(&mut self) -> Result<f32> {
        let batch = self.loader.next_batch()?;
        let device = self.config.device;
        let input = batch.input.to_device(device)?;
        let target = batch.target.to_device(device)?;
        self.model.zero_grad();
        let logits = self.model.forward(&input, true)?;
        let (loss, grad) = cross_entropy(&logits, &target)?;
        self.model.backward_params(&grad)?;
        self.optimizer.step(&mut self.model)?;
        let loss = loss.to_dtype(DType::F32)?.to_scalar::<f32>()?;
        self.step += 1;
        self.losses.push(loss);
        Ok(loss)
    }

    /// Steps completed.
    #[must_use]
    pub fn step_count(&self) -> u64 {
        self.step
    }

    /// The loss of every step so far; `losses()[k]` is the loss of step `k + 1`.
    #[must_use]
    pub fn losses(&self) -> &[f32] {
        &self.losses
    }

    /// The run's configuration.
    #[must_use]
    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// The model.
    #[must_use]
    pub fn model(&self) -> &Sequential {
        &self.model
    }

    /// The data loader (e.g. to read its epoch and position).
    #[must_use]
    pub fn loader(&self) -> &DataLoader {
        &self.loader
    }

    /// The generator both dropout layers draw from.
    #[must_use]
    pub fn dropout_generator(&self) -> &Generator {
        &self.dropout_generator
    }

    /// Everything needed to continue: parameters (`model.*`), momentum buffers
    /// (`optim.*`), the dropout generator and the default generators of the devices in
    /// use (`rng.*`), the loader position (`loader.state`), the step (`train.step`), the
    /// loss history (`train.loss_history`) and the configuration (`train.config`).
    pub fn checkpoint(&self) -> Result<Checkpoint> {
        let mut ck = Checkpoint::new();
        ck.put_module("model.", &self.model)?;
        ck.put_sgd("optim.", &self.optimizer)?;
        ck.put_generators(&[(DROPOUT_RNG, &self.dropout_generator)])?;
        ck.put_default_generators(&self.default_generator_devices())?;
        ck.put_loader(LOADER, &self.loader)?;
        ck.insert(
            STEP,
            &Tensor::from_vec(vec![self.step as i64], &[], Device::Cpu)?,
        )?;
        let losses = Tensor::from_slice(&self.losses, &[self.losses.len()], Device::Cpu)?;
        ck.insert(LOSSES, &losses)?;
        ck.set_metadata(CONFIG_KEY, self.config.to_json())?;
        Ok(ck)
    }

    /// Writes [`checkpoint`](Self::checkpoint) to `path`, atomically.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        Ok(self.checkpoint()?.save(path)?)
    }

    /// The configuration stored in a checkpoint (to inspect or adjust before
    /// [`from_checkpoint`](Self::from_checkpoint)).
    pub fn config_of(ck: &Checkpoint) -> Result<TrainConfig> {
        TrainConfig::from_json(ck.require_metadata(CONFIG_KEY)?)
    }

    /// Rebuilds the saved run. `num_workers` and `device`, when given, replace the saved
    /// ones (neither changes results); every other setting comes from the checkpoint.
    /// Restores parameters, momentum buffers, the dropout generator, the default
    /// generators of the devices the run uses (the CPU, and its GPU on a CUDA run), the
    /// loader position, the step and the loss history.
    ///
    /// Before anything is allocated or changed, what can be cross-checked is: the model
    /// tensors' shapes against the configuration's layers (a crafted `layers` cannot make
    /// it allocate a huge model), the loss history's length against the step, the loader
    /// state's key against the one the configuration's seed derives and its position
    /// against the step, and the momentum buffers against the model's parameters (all of
    /// them once a step has run, none before). Each mismatch is a
    /// [`CheckpointError::Inconsistent`] (or the shape / missing-tensor error) naming
    /// the entry.
    pub fn from_checkpoint(
        ck: &Checkpoint,
        num_workers: Option<usize>,
        device: Option<Device>,
    ) -> Result<Self> {
        let mut config = Trainer::config_of(ck)?;
        config.num_workers = num_workers.unwrap_or(config.num_workers);
        config.device = device.unwrap_or(config.device);
        check_model_shapes(ck, &config)?;
        let step = ck.tensor_like(STEP, &[], DType::I64)?.to_scalar::<i64>()?;
        let step = u64::try_from(step)
            .map_err(|_| invalid_entry(STEP, format!("negative step {step}")))?;
        let losses = ck.tensor(LOSSES)?;
        let losses = ck
            .tensor_like(LOSSES, &[losses.elem_count()], DType::F32)?
            .to_vec::<f32>()?;
        if losses.len() as u64 != step {
            return Err(
                invalid_entry(LOSSES, format!("{} losses for {step} steps", losses.len())).into(),
            );
        }
        let mut trainer = Trainer::new(config)?;
        trainer.check_loader_state(&ck.loader_state(LOADER)?, step)?;
        trainer.check_momentum_buffers(ck, step)?;
        ck.restore_module("model.", &mut trainer.model)?;
        ck.restore_sgd("optim.", &mut trainer.optimizer, &trainer.model)?;
        ck.restore_generators(&[(DROPOUT_RNG, &trainer.dropout_generator)])?;
        // A run moved to another device (a CPU run resumed on a GPU) has no saved state
        // for the new GPU's default generator: that one keeps its seed-derived state
        // (the loop never draws from it; portable arithmetic makes such moves keep the
        // curve, docs/contract.md §14).
        let saved: Vec<Device> = trainer
            .default_generator_devices()
            .into_iter()
            .filter(|d| {
                let name = crate::checkpoint::default_rng_name(*d);
                *d == Device::Cpu || ck.names().any(|n| n == name)
            })
            .collect();
        ck.restore_default_generators(&saved)?;
        ck.restore_loader(LOADER, &mut trainer.loader)?;
        trainer.step = step;
        trainer.losses = losses;
        Ok(trainer)
    }

    /// [`from_checkpoint`](Self::from_checkpoint) from a file.
    pub fn resume(
        path: impl AsRef<Path>,
        num_workers: Option<usize>,
        device: Option<Device>,
    ) -> Result<Self> {
        Trainer::from_checkpoint(&Checkpoint::load(path)?, num_workers, device)
    }

    /// The devices whose default generators a checkpoint carries: the CPU always, and
    /// the run's GPU on a CUDA run. The loop itself never draws from them; they are
    /// saved so that code around it which does (like a script after
    /// `torch.manual_seed`) resumes reproducibly too.
    fn default_generator_devices(&self) -> Vec<Device> {
        match self.config.device {
            Device::Cpu => vec![Device::Cpu],
            gpu => vec![Device::Cpu, gpu],
        }
    }

    /// A fresh trainer's loader has this run's key; a saved loader of the same run has
    /// the same key and sits where `step` batches from the start leave it.
    fn check_loader_state(&self, saved: &LoaderState, step: u64) -> Result<()> {
        let inconsistent = |reason: String| CheckpointError::Inconsistent {
            name: LOADER.into(),
            reason,
        };
        let expected = self.loader.key();
        if saved.key != expected {
            return Err(inconsistent(format!(
                "its key {:?} is not the key {expected:?} that the configuration's seed {} \
                 derives: the loader state belongs to another run",
                saved.key, self.config.seed
            ))
            .into());
        }
        let per_epoch = self.loader.batches_per_epoch() as u64;
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

    /// Every step updates every parameter, so after the first step each one has a
    /// momentum buffer (when momentum is on) and before it none has.
    fn check_momentum_buffers(&self, ck: &Checkpoint, step: u64) -> Result<()> {
        let key = "optim.momentum_buffers";
        let listed: Vec<String> = serde_json::from_str(ck.require_metadata(key)?)
            .map_err(|e| invalid_entry(key, e.to_string()))?;
        let mut listed: Vec<&str> = listed.iter().map(String::as_str).collect();
        listed.sort_unstable();
        let mut expected: Vec<String> = if step > 0 && self.config.momentum != 0.0 {
            self.model
                .named_parameters()
                .into_iter()
                .map(|(n, _)| n)
                .collect()
        } else {
            Vec::new()
        };
        expected.sort_unstable();
        if listed != expected {
            return Err(CheckpointError::Inconsistent {
                name: key.into(),
                reason: format!(
                    "{} momentum buffers {listed:?} are listed, but after {step} steps with \
                     momentum {} the model's {} parameters have {} buffers {expected:?}",
                    listed.len(),
                    self.config.momentum,
                    self.model.named_parameters().len(),
                    expected.len()
                ),
            }
            .into());
        }
        Ok(())
    }
}

/// The `model.*` tensors must be exactly the configuration's parameters, shape for
/// shape: checked on the checkpoint's own tensors before the model is built, so a
/// configuration edited to describe a huge model fails here instead of allocating.
/// (Public so that other training loops over the same model, like `distributed`'s, check
/// their checkpoints the same way.)
pub fn check_model_shapes(ck: &Checkpoint, config: &TrainConfig) -> Result<()> {
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
                "layers {:?} make {} parameter tensors, the checkpoint holds {stored} model.* tensors",
                config.layers,
                expected.len()
            ),
        }
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

/// `Linear, ReLU, Dropout` for each hidden width, then a final `Linear`: the layout of
/// PyTorch's `nn.Sequential` with the same layers, so parameter names match. Weights
/// come from `init`, dropout masks from `dropout_generator` (shared by the layers).
pub fn build_mlp(
    widths: &[usize],
    dropout: f64,
    init: &Generator,
    dropout_generator: &Generator,
) -> Result<Sequential> {
    let mut model = Sequential::new();
    for (i, pair) in widths.windows(2).enumerate() {
        model.push_boxed(Box::new(Linear::new(pair[0], pair[1], init)?));
        if i + 2 < widths.len() {
            model.push_boxed(Box::new(ReLU::new()));
            model.push_boxed(Box::new(Dropout::new(dropout, dropout_generator)?));
        }
    }
    Ok(model)
}
