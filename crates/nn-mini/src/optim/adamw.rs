//! `AdamW`: Adam with decoupled weight decay, `torch.optim.AdamW`'s rule.

use std::collections::{BTreeMap, BTreeSet};

use tensor_core::ops::{adamw_step_many_, AdamWSlot, AdamWStep};
use tensor_core::Tensor;

use crate::{Module, NnError, Result};

/// Hyperparameters of [`AdamW`], named and defaulted as in `torch.optim.AdamW`.
///
/// ```
/// use nn_mini::AdamWConfig;
/// let config = AdamWConfig::new(1e-3).betas(0.9, 0.95).weight_decay(0.1);
/// assert_eq!(config.eps, 1e-8);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AdamWConfig {
    /// Learning rate.
    pub lr: f64,
    /// `(beta1, beta2)`: the decay rates of the first and second moment estimates.
    pub betas: (f64, f64),
    /// Added to the denominator (outside the square root), for numerical stability.
    pub eps: f64,
    /// Decoupled weight decay (PyTorch's default for AdamW is 0.01).
    pub weight_decay: f64,
}

impl AdamWConfig {
    /// AdamW with learning rate `lr` and PyTorch's other defaults: betas (0.9, 0.999),
    /// eps 1e-8, weight decay 0.01.
    #[must_use]
    pub fn new(lr: f64) -> Self {
        AdamWConfig {
            lr,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }

    /// Sets `(beta1, beta2)`.
    #[must_use]
    pub fn betas(mut self, beta1: f64, beta2: f64) -> Self {
        self.betas = (beta1, beta2);
        self
    }

    /// Sets eps.
    #[must_use]
    pub fn eps(mut self, eps: f64) -> Self {
        self.eps = eps;
        self
    }

    /// Sets the weight decay.
    #[must_use]
    pub fn weight_decay(mut self, weight_decay: f64) -> Self {
        self.weight_decay = weight_decay;
        self
    }

    /// The checks `torch.optim.AdamW.__init__` makes, as typed errors.
    fn validate(&self) -> Result<()> {
        let bad = |message: String| Err(NnError::invalid("AdamW::new", message));
        let (beta1, beta2) = self.betas;
        if !(self.lr.is_finite() && self.lr >= 0.0) {
            return bad(format!("lr must be finite and >= 0, got {}", self.lr));
        }
        if !(0.0..1.0).contains(&beta1) || !(0.0..1.0).contains(&beta2) {
            return bad(format!("betas must be in [0, 1), got ({beta1}, {beta2})"));
        }
        if !(self.eps.is_finite() && self.eps >= 0.0) {
            return bad(format!("eps must be finite and >= 0, got {}", self.eps));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return bad(format!(
                "weight_decay must be finite and >= 0, got {}",
                self.weight_decay
            ));
        }
        Ok(())
    }
}

/// One parameter's AdamW state, named as PyTorch's `state_dict()["state"][i]`.
#[derive(Clone, Debug)]
pub struct AdamWState {
    /// Steps this parameter has taken.
    pub step: u64,
    /// The first moment estimate (running mean of gradients).
    pub exp_avg: Tensor,
    /// The second moment estimate (running mean of squared gradients).
    pub exp_avg_sq: Tensor,
}

/// AdamW, step for step `torch.optim.AdamW` (its single-tensor loop, `amsgrad=False`,
/// `maximize=False`): for each parameter with a gradient, its step count goes up by
/// one and [`Tensor::adamw_step_`] applies decoupled weight decay, the moment updates,
/// both bias corrections and the update with `eps` outside the square root.
///
/// Two parameter groups, as a GPT's training script builds them: the parameters named
/// in [`without_decay`](Self::without_decay) take no weight decay (biases, layer norm
/// weights, embeddings), the rest take the configured one. State is keyed by the
/// parameter's full name (from [`Module::named_parameters_mut`]), which is also its
/// checkpoint name; parameters without a gradient are skipped and get no state, as in
/// PyTorch.
#[derive(Clone, Debug)]
pub struct AdamW {
    config: AdamWConfig,
    no_decay: BTreeSet<String>,
    state: BTreeMap<String, AdamWState>,
}

impl AdamW {
    /// An optimiser with `config`; errors on the values PyTorch rejects.
    pub fn new(config: AdamWConfig) -> Result<Self> {
        config.validate()?;
        Ok(AdamW {
            config,
            no_decay: BTreeSet::new(),
            state: BTreeMap::new(),
        })
    }

    /// The same optimiser with the parameters `names` in a group of their own without
    /// weight decay.
    #[must_use]
    pub fn without_decay(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.no_decay.extend(names);
        self
    }

    /// The hyperparameters.
    #[must_use]
    pub fn config(&self) -> &AdamWConfig {
        &self.config
    }

    /// The parameters that take no weight decay.
    #[must_use]
    pub fn no_decay(&self) -> &BTreeSet<String> {
        &self.no_decay
    }

    /// Sets the learning rate of every group (what a scheduler does to
    /// `param_groups[i]["lr"]`); errors on a negative or non-finite rate.
    pub fn set_lr(&mut self, lr: f64) -> Result<()> {
        if !(lr.is_finite() && lr >= 0.0) {
            return Err(NnError::invalid(
                "AdamW::set_lr",
                format!("lr must be finite and >= 0, got {lr}"),
            ));
        }
        self.config.lr = lr;
        Ok(())
    }

    /// Every parameter's state, by name (empty before the first step).
    #[must_use]
    pub fn state(&self) -> &BTreeMap<String, AdamWState> {
        &self.state
    }

    /// Replaces all state (checkpoint restore).
    pub fn set_state(&mut self, state: BTreeMap<String, AdamWState>) {
        self.state = state;
    }

    /// Applies one update to every parameter of `module` that has a gradient.
    pub fn step(&mut self, module: &mut dyn Module) -> Result<()> {
        let AdamWConfig {
            lr,
            betas: (beta1, beta2),
            eps,
            weight_decay,
        } = self.config;
        // Every parameter's state first (zeros at its first step), then one fused step
        // over all of them: `adamw_step_many_` launches one kernel per 24 parameters on
        // a GPU, with the bits of a step per parameter.
        let mut params = module.named_parameters_mut();
        let mut grads = Vec::with_capacity(params.len());
        for (name, param) in &mut params {
            let Some(grad) = &param.grad else { continue };
            grads.push(grad.contiguous()?);
            if !param.value.is_contiguous() {
                param.value = param.value.contiguous()?;
            }
            if !self.state.contains_key(name.as_str()) {
                let state = AdamWState {
                    step: 0,
                    exp_avg: param.value.zeros_like()?,
                    exp_avg_sq: param.value.zeros_like()?,
                };
                self.state.insert(name.clone(), state);
            }
        }
        let mut states: std::collections::BTreeMap<&str, &mut AdamWState> = self
            .state
            .iter_mut()
            .map(|(k, v)| (k.as_str(), v))
            .collect();
        let mut slots = Vec::with_capacity(grads.len());
        let with_grads = params.iter_mut().filter(|(_, p)| p.grad.is_some());
        for ((name, param), grad) in with_grads.zip(&grads) {
            let decay = if self.no_decay.contains(name.as_str()) {
                0.0
            } else {
                weight_decay
            };
            let state = states
                .remove(name.as_str())
                .expect("every parameter with a gradient has its state, made above");
            let step = state.step + 1;
            slots.push(AdamWSlot {
                param: &mut param.value,
                exp_avg: &mut state.exp_avg,
                exp_avg_sq: &mut state.exp_avg_sq,
                grad,
                hyper: AdamWStep {
                    lr,
                    beta1,
                    beta2,
                    eps,
                    weight_decay: decay,
                    step,
                },
            });
        }
        adamw_step_many_(&mut slots)?;
        // Counted once the step is taken (a rejected step changes nothing).
        drop(slots);
        for (name, param) in &params {
            if param.grad.is_some() {
                if let Some(state) = self.state.get_mut(name.as_str()) {
                    state.step += 1;
                }
            }
        }
        Ok(())
    }
}
