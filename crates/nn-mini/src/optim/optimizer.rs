//! `Optimizer`: the optimisers a training run can hold, one type for the run's state
//! and its checkpoint.

use crate::{AdamW, Module, Result, Sgd};

/// One of nn-mini's optimisers. A training run keeps its optimiser as this, so the
/// run's state and checkpoint code is written once; a checkpoint records which one it
/// holds ([`name`](Self::name)) and refuses to resume under another.
#[derive(Clone, Debug)]
pub enum Optimizer {
    /// SGD with momentum ([`Sgd`]).
    Sgd(Sgd),
    /// AdamW ([`AdamW`]).
    AdamW(AdamW),
}

impl Optimizer {
    /// The optimiser's name as checkpoints record it: `"sgd"` or `"adamw"`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Optimizer::Sgd(_) => "sgd",
            Optimizer::AdamW(_) => "adamw",
        }
    }

    /// Applies one update to every parameter of `module` that has a gradient.
    pub fn step(&mut self, module: &mut dyn Module) -> Result<()> {
        match self {
            Optimizer::Sgd(sgd) => sgd.step(module),
            Optimizer::AdamW(adamw) => adamw.step(module),
        }
    }

    /// The AdamW inside, if this is one.
    pub fn as_adamw_mut(&mut self) -> Option<&mut AdamW> {
        match self {
            Optimizer::AdamW(adamw) => Some(adamw),
            Optimizer::Sgd(_) => None,
        }
    }
}

impl From<Sgd> for Optimizer {
    fn from(sgd: Sgd) -> Self {
        Optimizer::Sgd(sgd)
    }
}

impl From<AdamW> for Optimizer {
    fn from(adamw: AdamW) -> Self {
        Optimizer::AdamW(adamw)
    }
}
