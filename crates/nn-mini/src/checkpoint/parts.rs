//! How each piece of a training run goes into and comes out of a [`Checkpoint`]:
//! parameters, optimiser buffers, generator states, loader state.
//!
//! Every `restore_*` checks everything first and changes nothing on error, so a bad
//! checkpoint never leaves a half-restored model behind.

use std::collections::BTreeMap;

use rng_gen::Generator;
use tensor_core::{Device, Tensor};

use super::{Checkpoint, CheckpointError};
use crate::data::LoaderState;
use crate::{Module, Sgd};

/// Name of the default CPU generator's state.
pub const DEFAULT_CPU_RNG: &str = "rng.default.cpu";

/// Name of CUDA device `index`'s default generator state.
#[must_use]
pub fn default_cuda_rng_name(index: usize) -> String {
    format!("rng.default.cuda:{index}")
}

/// Name of `device`'s default generator state: [`DEFAULT_CPU_RNG`] or
/// [`default_cuda_rng_name`].
#[must_use]
pub fn default_rng_name(device: Device) -> String {
    match device {
        Device::Cpu => DEFAULT_CPU_RNG.to_string(),
        Device::Cuda(index) => default_cuda_rng_name(index),
    }
}

/// Generator names that would land in the default generators' entries (`rng.default`
/// and `rng.default.*`) are refused, so a user generator can never overwrite them.
fn check_generator_name(name: &str) -> Result<(), CheckpointError> {
    if name == "default" || name.starts_with("default.") {
        return Err(CheckpointError::ReservedGeneratorName { name: name.into() });
    }
    Ok(())
}

/// An [`CheckpointError::InvalidEntry`].
fn invalid(name: &str, reason: impl ToString) -> CheckpointError {
    CheckpointError::InvalidEntry {
        name: name.to_string(),
        reason: reason.to_string(),
    }
}

impl Checkpoint {
    /// Stores every parameter of `module` as `{prefix}{name}` (e.g. `model.0.weight`).
    pub fn put_module(&mut self, prefix: &str, module: &dyn Module) -> Result<(), CheckpointError> {
        for (name, p) in module.named_parameters() {
            self.insert(format!("{prefix}{name}"), &p.value)?;
        }
        Ok(())
    }

    /// Overwrites every parameter of `module` with `{prefix}{name}` (moved to the
    /// parameter's device) and clears its gradient. Errors with `MissingTensor`,
    /// `ShapeMismatch` or `DTypeMismatch` naming the first offending tensor.
    pub fn restore_module(
        &self,
        prefix: &str,
        module: &mut dyn Module,
    ) -> Result<(), CheckpointError> {
        let mut values = Vec::new();
        for (name, p) in module.named_parameters() {
            let t =
                self.tensor_like(&format!("{prefix}{name}"), p.value.dims(), p.value.dtype())?;
            values.push(t.to_device(p.value.device())?);
        }
        for ((_, p), value) in module.named_parameters_mut().into_iter().zip(values) {
            p.value = value;
            p.grad = None;
        }
        Ok(())
    }

    /// Stores the optimiser's momentum buffers as `{prefix}momentum_buffer.{param}` and
    /// their list as metadata, so a missing buffer is detected on restore.
    pub fn put_sgd(&mut self, prefix: &str, sgd: &Sgd) -> Result<(), CheckpointError> {
        let names: Vec<&String> = sgd.momentum_buffers().keys().collect();
        for (name, buf) in sgd.momentum_buffers() {
            self.insert(format!("{prefix}momentum_buffer.{name}"), buf)?;
        }
        let list = serde_json::to_string(&names).map_err(|e| invalid(prefix, e))?;
        self.set_metadata(format!("{prefix}momentum_buffers"), list)
    }

    /// Restores the momentum buffers saved by [`put_sgd`](Self::put_sgd), checking each
    /// against the shape and dtype of the parameter of `module` it belongs to, and the
    /// stored buffers against their list (none unlisted, none listed twice). A
    /// parameter without a buffer is legitimate here (it never had a gradient); callers
    /// that know every parameter must have one (the [`Trainer`](crate::train::Trainer)
    /// after its first step) check the count themselves.
    pub fn restore_sgd(
        &self,
        prefix: &str,
        sgd: &mut Sgd,
        module: &dyn Module,
    ) -> Result<(), CheckpointError> {
        let key = format!("{prefix}momentum_buffers");
        let names: Vec<String> =
            serde_json::from_str(self.require_metadata(&key)?).map_err(|e| invalid(&key, e))?;
        let params: BTreeMap<String, &Tensor> = module
            .named_parameters()
            .into_iter()
            .map(|(n, p)| (n, &p.value))
            .collect();
        // Every stored buffer must be listed, once: a list edited to leave buffers out
        // would silently restart their momentum.
        let stored_prefix = format!("{prefix}momentum_buffer.");
        let stored: Vec<&str> = self
            .names()
            .filter_map(|n| n.strip_prefix(stored_prefix.as_str()))
            .collect();
        let listed: std::collections::BTreeSet<&str> = names.iter().map(String::as_str).collect();
        if listed.len() != names.len() {
            return Err(CheckpointError::Inconsistent {
                name: key,
                reason: format!("the list {names:?} names a parameter twice"),
            });
        }
        if let Some(unlisted) = stored.iter().find(|n| !listed.contains(*n)) {
            return Err(CheckpointError::Inconsistent {
                name: key,
                reason: format!(
                    "momentum buffer {stored_prefix}{unlisted} is stored but not listed \
                     ({} stored, {} listed)",
                    stored.len(),
                    names.len()
                ),
            });
        }
        let mut buffers = BTreeMap::new();
        for name in names {
            let value = params
                .get(&name)
                .ok_or_else(|| invalid(&key, format!("the model has no parameter {name:?}")))?;
            let t = self.tensor_like(
                &format!("{prefix}momentum_buffer.{name}"),
                value.dims(),
                value.dtype(),
            )?;
            buffers.insert(name, t.to_device(value.device())?);
        }
        sgd.set_momentum_buffers(buffers);
        Ok(())
    }

    /// Stores the state of each generator the training loop owns as `rng.{name}`.
    /// Names `default` and `default.*` are refused
    /// ([`CheckpointError::ReservedGeneratorName`]): the default generators have their
    /// own entries, written only by [`put_default_generators`](Self::put_default_generators).
    pub fn put_generators(
        &mut self,
        generators: &[(&str, &Generator)],
    ) -> Result<(), CheckpointError> {
        for (name, _) in generators {
            check_generator_name(name)?;
        }
        for (name, g) in generators {
            self.insert_bytes(format!("rng.{name}"), &g.get_state())?;
        }
        Ok(())
    }

    /// Restores what [`put_generators`](Self::put_generators) stored, into exactly the
    /// generators listed (the default generators are untouched). Every state is
    /// validated (length, magic, version, checksum) before any generator changes.
    pub fn restore_generators(
        &self,
        generators: &[(&str, &Generator)],
    ) -> Result<(), CheckpointError> {
        let mut checked = Vec::with_capacity(generators.len());
        for (name, g) in generators {
            check_generator_name(name)?;
            checked.push((self.generator_state(&format!("rng.{name}"))?, *g));
        }
        for (key, g) in checked {
            g.set_key(key);
        }
        Ok(())
    }

    /// Stores the state of the default generator of each device in `devices` (as
    /// [`default_rng_name`]), like saving `torch.get_rng_state()` and
    /// `torch.cuda.get_rng_state(i)` next to a model. Explicit on purpose: which
    /// process-wide generators a checkpoint carries is the caller's decision. Errors
    /// with [`CheckpointError::Generator`] (source `NoSuchDevice`) for a CUDA device
    /// that does not exist. Inside [`rng_gen::fork_rng`] the calling thread's forked
    /// copies are what is saved.
    pub fn put_default_generators(&mut self, devices: &[Device]) -> Result<(), CheckpointError> {
        let mut states = Vec::new();
        for device in Device::distinct(devices) {
            let name = default_rng_name(device);
            let generator = rng_gen::default_generator(device)
                .map_err(|e| CheckpointError::generator(&name, e))?;
            states.push((name, generator.get_state()));
        }
        for (name, state) in states {
            self.insert_bytes(name, &state)?;
        }
        Ok(())
    }

    /// Restores the default generators of exactly the devices listed from what
    /// [`put_default_generators`](Self::put_default_generators) stored. All states are
    /// validated, and all devices looked up, before any generator changes.
    pub fn restore_default_generators(&self, devices: &[Device]) -> Result<(), CheckpointError> {
        let mut checked = Vec::new();
        for device in Device::distinct(devices) {
            let name = default_rng_name(device);
            let key = self.generator_state(&name)?;
            let generator = rng_gen::default_generator(device)
                .map_err(|e| CheckpointError::generator(&name, e))?;
            checked.push((key, generator));
        }
        for (key, generator) in checked {
            generator.set_key(key);
        }
        Ok(())
    }

    /// The key in generator state entry `name`, validated.
    fn generator_state(&self, name: &str) -> Result<rng_gen::Key, CheckpointError> {
        let scratch = Generator::new(Device::Cpu);
        scratch
            .set_state(&self.bytes(name)?)
            .map_err(|e| CheckpointError::generator(name, e))?;
        Ok(scratch.key())
    }

    /// The [`LoaderState`] stored under `name`, parsed and checked, without applying
    /// it (to cross-check it against a run before restoring anything).
    pub fn loader_state(&self, name: &str) -> Result<LoaderState, CheckpointError> {
        LoaderState::from_bytes(&self.bytes(name)?).map_err(|e| CheckpointError::loader(name, e))
    }
}
