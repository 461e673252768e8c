//! How an [`Optimizer`] goes into and comes out of a [`Checkpoint`]: which optimiser it
//! is (metadata `{prefix}kind`), and its state: SGD's momentum buffers
//! ([`Checkpoint::put_sgd`]), AdamW's per-parameter step counts and moments.
//!
//! A checkpoint of one optimiser refuses to resume under another, naming both
//! ([`CheckpointError::KindMismatch`]); one written before the kind was recorded holds
//! SGD's state (the only optimiser then).

use std::collections::{BTreeMap, BTreeSet};

use tensor_core::{DType, Device, Tensor};

use super::{Checkpoint, CheckpointError};
use crate::{AdamW, AdamWState, Module, Optimizer};

/// The kind a checkpoint without `{prefix}kind` holds.
const LEGACY_KIND: &str = "sgd";

/// An [`CheckpointError::InvalidEntry`].
fn invalid(name: &str, reason: impl ToString) -> CheckpointError {
    CheckpointError::InvalidEntry {
        name: name.to_string(),
        reason: reason.to_string(),
    }
}

impl Checkpoint {
    /// Stores which optimiser this is (`{prefix}kind`) and its state: SGD's momentum
    /// buffers as [`put_sgd`](Self::put_sgd) does; AdamW's as
    /// `{prefix}exp_avg.{param}`, `{prefix}exp_avg_sq.{param}` and
    /// `{prefix}step.{param}` (i64) with the list of parameters in `{prefix}adamw_params`.
    pub fn put_optimizer(
        &mut self,
        prefix: &str,
        optimizer: &Optimizer,
    ) -> Result<(), CheckpointError> {
        self.set_metadata(format!("{prefix}kind"), optimizer.name())?;
        match optimizer {
            Optimizer::Sgd(sgd) => self.put_sgd(prefix, sgd),
            Optimizer::AdamW(adamw) => self.put_adamw(prefix, adamw),
        }
    }

    fn put_adamw(&mut self, prefix: &str, adamw: &AdamW) -> Result<(), CheckpointError> {
        let names: Vec<&String> = adamw.state().keys().collect();
        for (name, state) in adamw.state() {
            self.insert(format!("{prefix}exp_avg.{name}"), &state.exp_avg)?;
            self.insert(format!("{prefix}exp_avg_sq.{name}"), &state.exp_avg_sq)?;
            let step =
                i64::try_from(state.step).map_err(|_| invalid(name, "step count overflows i64"))?;
            let step = Tensor::from_vec(vec![step], &[], Device::Cpu)?;
            self.insert(format!("{prefix}step.{name}"), &step)?;
        }
        let list = serde_json::to_string(&names).map_err(|e| invalid(prefix, e))?;
        self.set_metadata(format!("{prefix}adamw_params"), list)
    }

    /// The optimiser kind stored under `{prefix}kind` (`"sgd"` when absent).
    pub fn optimizer_kind(&self, prefix: &str) -> &str {
        self.metadata(&format!("{prefix}kind"))
            .unwrap_or(LEGACY_KIND)
    }

    /// Errors unless the checkpoint holds `optimizer`'s kind.
    fn check_optimizer_kind(
        &self,
        prefix: &str,
        optimizer: &Optimizer,
    ) -> Result<(), CheckpointError> {
        let saved = self.optimizer_kind(prefix);
        if saved != optimizer.name() {
            return Err(CheckpointError::KindMismatch {
                name: format!("{prefix}kind"),
                what: "optimiser",
                saved: saved.to_string(),
                expected: optimizer.name().to_string(),
            });
        }
        Ok(())
    }

    /// Restores what [`put_optimizer`](Self::put_optimizer) stored into `optimizer`,
    /// checking first that it is the same kind and that every state tensor matches the
    /// shape and dtype of the parameter of `module` it belongs to. Nothing changes on
    /// error.
    pub fn restore_optimizer(
        &self,
        prefix: &str,
        optimizer: &mut Optimizer,
        module: &dyn Module,
    ) -> Result<(), CheckpointError> {
        self.check_optimizer_kind(prefix, optimizer)?;
        match optimizer {
            Optimizer::Sgd(sgd) => self.restore_sgd(prefix, sgd, module),
            Optimizer::AdamW(adamw) => {
                let state = self.adamw_state(prefix, module)?;
                adamw.set_state(state);
                Ok(())
            }
        }
    }

    /// AdamW's state as stored, checked against `module`'s parameters and against its
    /// list (none unlisted, none listed twice).
    fn adamw_state(
        &self,
        prefix: &str,
        module: &dyn Module,
    ) -> Result<BTreeMap<String, AdamWState>, CheckpointError> {
        let key = format!("{prefix}adamw_params");
        let names = self.listed_names(&key)?;
        let params: BTreeMap<String, &Tensor> = module
            .named_parameters()
            .into_iter()
            .map(|(n, p)| (n, &p.value))
            .collect();
        for part in ["exp_avg.", "exp_avg_sq.", "step."] {
            let stored = format!("{prefix}{part}");
            if let Some(unlisted) = self
                .names()
                .filter_map(|n| n.strip_prefix(stored.as_str()))
                .find(|n| !names.contains(*n))
            {
                return Err(CheckpointError::Inconsistent {
                    name: key,
                    reason: format!("{stored}{unlisted} is stored but its parameter is not listed"),
                });
            }
        }
        let mut state = BTreeMap::new();
        for name in names {
            let value = params
                .get(&name)
                .ok_or_else(|| invalid(&key, format!("the model has no parameter {name:?}")))?;
            let moment = |part: &str| -> Result<Tensor, CheckpointError> {
                let t = self.tensor_like(
                    &format!("{prefix}{part}.{name}"),
                    value.dims(),
                    value.dtype(),
                )?;
                Ok(t.to_device(value.device())?)
            };
            let step_name = format!("{prefix}step.{name}");
            let step = self
                .tensor_like(&step_name, &[], DType::I64)?
                .to_scalar::<i64>()?;
            let step = u64::try_from(step)
                .map_err(|_| invalid(&step_name, format!("negative step {step}")))?;
            let entry = AdamWState {
                step,
                exp_avg: moment("exp_avg")?,
                exp_avg_sq: moment("exp_avg_sq")?,
            };
            state.insert(name, entry);
        }
        Ok(state)
    }

    /// The JSON list of parameter names under metadata `key`, each once.
    fn listed_names(&self, key: &str) -> Result<BTreeSet<String>, CheckpointError> {
        let names: Vec<String> =
            serde_json::from_str(self.require_metadata(key)?).map_err(|e| invalid(key, e))?;
        let set: BTreeSet<String> = names.iter().cloned().collect();
        if set.len() != names.len() {
            return Err(CheckpointError::Inconsistent {
                name: key.to_string(),
                reason: format!("the list {names:?} names a parameter twice"),
            });
        }
        Ok(set)
    }

    /// Checks what a training run knows of its optimiser's state after `step` steps in
    /// which every parameter got a gradient: none before the first step; after it,
    /// SGD with momentum holds a buffer for every parameter, AdamW a state for every
    /// parameter at step count `step`. `parameters` are the model's parameter names.
    pub fn check_optimizer_state(
        &self,
        prefix: &str,
        optimizer: &Optimizer,
        parameters: &[String],
        step: u64,
    ) -> Result<(), CheckpointError> {
        self.check_optimizer_kind(prefix, optimizer)?;
        let (key, expected) = match optimizer {
            Optimizer::Sgd(sgd) => {
                let with_buffers = step > 0 && sgd.config().momentum != 0.0;
                (format!("{prefix}momentum_buffers"), with_buffers)
            }
            Optimizer::AdamW(_) => (format!("{prefix}adamw_params"), step > 0),
        };
        let listed = self.listed_names(&key)?;
        let want: BTreeSet<String> = match expected {
            true => parameters.iter().cloned().collect(),
            false => BTreeSet::new(),
        };
        if listed != want {
            return Err(CheckpointError::Inconsistent {
                name: key,
                reason: format!(
                    "the {} state of {} parameters {listed:?} is stored, but after {step} steps \
                     the model's {} parameters have state for {} {want:?}",
                    optimizer.name(),
                    listed.len(),
                    parameters.len(),
                    want.len()
                ),
            });
        }
        if matches!(optimizer, Optimizer::AdamW(_)) {
            for name in &listed {
                let step_name = format!("{prefix}step.{name}");
                let saved = self
                    .tensor_like(&step_name, &[], DType::I64)?
                    .to_scalar::<i64>()?;
                if u64::try_from(saved) != Ok(step) {
                    return Err(CheckpointError::Inconsistent {
                        name: step_name,
                        reason: format!(
                            "the parameter has taken {saved} AdamW steps, but the run is at step {step}"
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}
