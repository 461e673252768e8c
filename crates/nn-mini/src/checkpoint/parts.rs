//! How each piece of a training run goes into and comes out of a [`Checkpoint`]:
//! parameters, optimiser buffers, generator states, loader state.
//!
//! Every `restore_*` checks everything first and changes nothing on error, so a bad
//! checkpoint never leaves a half-restored model behind.

use std::collections::BTreeMap;

use rng_gen::Generator;
use tensor_core::{Device, Tensor};

use super::{Checkpoint, CheckpointError};
use crate::data::{DataLoader, LoaderState};
use crate::{Module, Sgd};

/// Name of the default CPU generator's state.
pub const DEFAULT_CPU_RNG: &str = "rng.default.cpu";

/// Name of CUDA device `index`'s default generator state.
#[must_use]
pub fn default_cuda_rng_name(index: usize) -> String {
    format!("rng.default.cuda:{index}")
}

/// Metadata key holding how many CUDA default-generator states were saved.
const CUDA_COUNT_KEY: &str = "rng.default.cuda_count";

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
    /// against the shape and dtype of the parameter of `module` it belongs to.
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

    /// Stores the state of the default CPU generator, of every CUDA device's default
    /// generator when `cuda` is set (a run on a GPU), and of each named generator the
    /// training loop owns, as `rng.{name}`.
    pub fn put_generators(
        &mut self,
        generators: &[(&str, &Generator)],
        cuda: bool,
    ) -> Result<(), CheckpointError> {
        self.insert_bytes(DEFAULT_CPU_RNG, &rng_gen::get_rng_state())?;
        if cuda {
            let states = rng_gen::cuda::get_rng_state_all();
            for (i, state) in states.iter().enumerate() {
                self.insert_bytes(default_cuda_rng_name(i), state)?;
            }
            self.set_metadata(CUDA_COUNT_KEY, states.len().to_string())?;
        }
        for (name, g) in generators {
            self.insert_bytes(format!("rng.{name}"), &g.get_state())?;
        }
        Ok(())
    }

    /// Restores what [`put_generators`](Self::put_generators) stored. Every state is
    /// validated (length, magic, version, checksum) before any generator changes.
    pub fn restore_generators(
        &self,
        generators: &[(&str, &Generator)],
        cuda: bool,
    ) -> Result<(), CheckpointError> {
        let scratch = Generator::new(Device::Cpu);
        let checked = |name: &str| -> Result<Vec<u8>, CheckpointError> {
            let bytes = self.bytes(name)?;
            scratch.set_state(&bytes).map_err(|e| invalid(name, e))?;
            Ok(bytes)
        };
        let cpu = checked(DEFAULT_CPU_RNG)?;
        let mut cuda_states = Vec::new();
        if cuda {
            let count: usize = self
                .require_metadata(CUDA_COUNT_KEY)?
                .parse()
                .map_err(|e| invalid(CUDA_COUNT_KEY, e))?;
            for i in 0..count {
                cuda_states.push(checked(&default_cuda_rng_name(i))?);
            }
        }
        let named = generators
            .iter()
            .map(|(name, g)| Ok((checked(&format!("rng.{name}"))?, *g)))
            .collect::<Result<Vec<_>, CheckpointError>>()?;
        if cuda {
            rng_gen::cuda::set_rng_state_all(&cuda_states)
                .map_err(|e| invalid(&default_cuda_rng_name(0), e))?;
        }
        rng_gen::set_rng_state(&cpu).map_err(|e| invalid(DEFAULT_CPU_RNG, e))?;
        for (bytes, g) in named {
            g.set_state(&bytes).map_err(|e| invalid("rng", e))?;
        }
        Ok(())
    }

    /// Stores the loader's [`LoaderState`] bytes under `name`; errors if the loader
    /// delivered out of order and has no exact position (see [`DataLoader::state`]).
    pub fn put_loader(&mut self, name: &str, loader: &DataLoader) -> Result<(), CheckpointError> {
        let state = loader.state().map_err(|e| invalid(name, e))?;
        self.insert_bytes(name, &state.to_bytes())
    }

    /// Moves `loader` to the position stored under `name`; the next batch is the one the
    /// saved loader would have delivered next.
    pub fn restore_loader(
        &self,
        name: &str,
        loader: &mut DataLoader,
    ) -> Result<(), CheckpointError> {
        let state = LoaderState::from_bytes(&self.bytes(name)?).map_err(|e| invalid(name, e))?;
        loader.set_state(&state).map_err(|e| invalid(name, e))
    }
}
