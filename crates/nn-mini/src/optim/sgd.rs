//! `Sgd`: stochastic gradient descent with PyTorch's exact update rule.

use std::collections::BTreeMap;

use tensor_core::ops::SgdMomentumStep;
use tensor_core::{DType, Tensor};

use crate::{Module, NnError, Result};

/// Hyperparameters of [`Sgd`], named and defaulted as in `torch.optim.SGD`.
///
/// ```
/// use nn_mini::SgdConfig;
/// let config = SgdConfig::new(0.05).momentum(0.9).weight_decay(1e-4);
/// assert_eq!(config.dampening, 0.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdConfig {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor (0 disables the momentum buffers).
    pub momentum: f64,
    /// Dampening of the gradient's contribution to the momentum buffer.
    pub dampening: f64,
    /// L2 penalty, added to the gradient as `weight_decay * param`.
    pub weight_decay: f64,
    /// Nesterov momentum (needs `momentum > 0` and `dampening == 0`).
    pub nesterov: bool,
}

impl SgdConfig {
    /// Plain SGD with learning rate `lr`.
    #[must_use]
    pub fn new(lr: f64) -> Self {
        SgdConfig {
            lr,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
        }
    }

    /// Sets the momentum factor.
    #[must_use]
    pub fn momentum(mut self, momentum: f64) -> Self {
        self.momentum = momentum;
        self
    }

    /// Sets the dampening.
    #[must_use]
    pub fn dampening(mut self, dampening: f64) -> Self {
        self.dampening = dampening;
        self
    }

    /// Sets the weight decay.
    #[must_use]
    pub fn weight_decay(mut self, weight_decay: f64) -> Self {
        self.weight_decay = weight_decay;
        self
    }

    /// Turns Nesterov momentum on or off.
    #[must_use]
    pub fn nesterov(mut self, nesterov: bool) -> Self {
        self.nesterov = nesterov;
        self
    }

    /// The checks `torch.optim.SGD.__init__` makes, as typed errors.
    fn validate(&self) -> Result<()> {
        let bad = |message: String| Err(NnError::invalid("Sgd::new", message));
        for (name, value) in [
            ("lr", self.lr),
            ("momentum", self.momentum),
            ("dampening", self.dampening),
            ("weight_decay", self.weight_decay),
        ] {
            if !value.is_finite() || value < 0.0 {
                return bad(format!("{name} must be finite and >= 0, got {value}"));
            }
        }
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return bad(format!(
                "nesterov needs momentum > 0 and dampening = 0, got momentum {} and dampening {}",
                self.momentum, self.dampening
            ));
        }
        Ok(())
    }
}

/// SGD with momentum, dampening, weight decay and Nesterov, step for step the rule of
/// `torch.optim.SGD` (including its first-step special case):
///
/// ```text
/// d_p = g + weight_decay * p
/// buf = d_p                                        on a parameter's first step
/// buf = momentum * buf + (1 - dampening) * d_p     afterwards
/// d_p = d_p + momentum * buf   if nesterov   else   d_p = buf
/// p   = p - lr * d_p
/// ```
///
/// Momentum buffers are keyed by the parameter's full name (from
/// [`Module::named_parameters_mut`]), which is also their checkpoint name. Parameters
/// without a gradient are skipped and get no buffer, as in PyTorch.
#[derive(Debug, Clone)]
pub struct Sgd {
    config: SgdConfig,
    buffers: BTreeMap<String, Tensor>,
}

impl Sgd {
    /// An optimiser with `config`; errors on the values PyTorch rejects.
    pub fn new(config: SgdConfig) -> Result<Self> {
        config.validate()?;
        Ok(Sgd {
            config,
            buffers: BTreeMap::new(),
        })
    }

    /// The hyperparameters.
    #[must_use]
    pub fn config(&self) -> &SgdConfig {
        &self.config
    }

    /// The momentum buffers by parameter name (empty before the first step or without
    /// momentum).
    #[must_use]
    pub fn momentum_buffers(&self) -> &BTreeMap<String, Tensor> {
        &self.buffers
    }

    /// Replaces all momentum buffers (checkpoint restore). The next step treats a
    /// parameter with a buffer as past its first step.
    pub fn set_momentum_buffers(&mut self, buffers: BTreeMap<String, Tensor>) {
        self.buffers = buffers;
    }

    /// Applies one update to every parameter of `module` that has a gradient.
    pub fn step(&mut self, module: &mut dyn Module) -> Result<()> {
        let SgdConfig {
            lr,
            momentum,
            dampening,
            weight_decay,
            nesterov,
        } = self.config;
        let fused = SgdMomentumStep {
            lr,
            momentum,
            dampening,
            weight_decay,
            nesterov,
        };
        for (name, param) in module.named_parameters_mut() {
            let Some(grad) = &param.grad else { continue };
            // Past a parameter's first step: one fused op (one pass, one kernel on a
            // GPU), bit-identical to the whole-tensor ops below, which remain for the
            // first step and for layouts the fused op does not take.
            if momentum != 0.0 {
                if let Some(buf) = self.buffers.get_mut(&name) {
                    if fused_applies(&param.value, buf, grad) {
                        param.value.sgd_momentum_step_(buf, grad, &fused)?;
                        continue;
                    }
                }
            }
            let mut d_p = grad.clone();
            if weight_decay != 0.0 {
                d_p.axpy_(weight_decay, &param.value)?;
            }
            if momentum != 0.0 {
                let buf = match self.buffers.get_mut(&name) {
                    Some(buf) => {
                        buf.scale_(momentum)?;
                        buf.axpy_(1.0 - dampening, &d_p)?;
                        buf
                    }
                    None => self.buffers.entry(name).or_insert(d_p.clone()),
                };
                if nesterov {
                    d_p.axpy_(momentum, buf)?;
                } else {
                    d_p = buf.clone();
                }
            }
            param.value.axpy_(-lr, &d_p)?;
        }
        Ok(())
    }
}

/// Whether [`Tensor::sgd_momentum_step_`] takes these tensors: contiguous, one float
/// dtype, one device, one shape. Anything else goes through the whole-tensor ops, which
/// broadcast nothing either but report mismatches with their own typed errors.
fn fused_applies(value: &Tensor, buf: &Tensor, grad: &Tensor) -> bool {
    let same = |t: &Tensor| {
        t.device() == value.device()
            && t.dtype() == value.dtype()
            && t.dims() == value.dims()
            && t.is_contiguous()
    };
    matches!(value.dtype(), DType::F32 | DType::F64) && same(value) && same(buf) && same(grad)
}
