//! The `Module` trait: layer-level forward and backward, and the parameters a layer owns.
//!
//! There is no autograd tape in ditto. Each layer saves what its backward needs during
//! `forward(train = true)` and consumes it in `backward`, which returns the gradient
//! with respect to the layer's input and *adds* the gradients of its parameters into
//! [`Parameter::grad`] (like PyTorch's `.grad` accumulation). A training step is
//! `zero_grad`, `forward`, loss, `backward`, optimiser step.

use tensor_core::Tensor;

use crate::{GlobalRows, GradRowGroups, NnError, Result};

/// A trainable tensor and its accumulated gradient.
///
/// `name` is the layer-local name (`weight`, `bias`); containers prefix it
/// (`0.weight`), giving PyTorch's `state_dict` names, which is what checkpoints store.
#[derive(Clone, Debug)]
pub struct Parameter {
    /// Layer-local name.
    pub name: String,
    /// The current value.
    pub value: Tensor,
    /// The gradient accumulated since the last [`Parameter::zero_grad`]; `None` when no
    /// backward has run since (PyTorch's `set_to_none=True`), which optimisers skip.
    pub grad: Option<Tensor>,
    /// Per-row-group gradients: while [`GradRowGroups`] are set on the layer
    /// ([`Module::set_grad_row_groups`]), backward accumulates group `g`'s gradient into
    /// `group_grads[g]` instead of `grad`. Empty when no grouped backward has run since
    /// the last [`Parameter::zero_grad`].
    pub group_grads: Vec<Tensor>,
}

impl Parameter {
    /// A parameter with no gradient yet.
    #[must_use]
    pub fn new(name: impl Into<String>, value: Tensor) -> Self {
        Parameter {
            name: name.into(),
            value,
            grad: None,
            group_grads: Vec::new(),
        }
    }

    /// Adds `grad` into the accumulated gradient (or stores it when there is none),
    /// so two backward passes before a step sum their gradients, as in PyTorch.
    pub fn accumulate_grad(&mut self, grad: Tensor) -> Result<()> {
        match &mut self.grad {
            Some(acc) => acc.axpy_(1.0, &grad)?,
            None => self.grad = Some(grad),
        }
        Ok(())
    }

    /// Adds one gradient per row group into [`Parameter::group_grads`] (or stores them
    /// when there are none), the grouped twin of [`Parameter::accumulate_grad`].
    pub fn accumulate_group_grads(&mut self, grads: Vec<Tensor>) -> Result<()> {
        if self.group_grads.is_empty() {
            self.group_grads = grads;
            return Ok(());
        }
        if grads.len() != self.group_grads.len() {
            return Err(NnError::invalid(
                "Parameter::accumulate_group_grads",
                format!(
                    "parameter {} holds {} group gradients, got {}; the row groups changed between backward passes",
                    self.name,
                    self.group_grads.len(),
                    grads.len()
                ),
            ));
        }
        for (acc, grad) in self.group_grads.iter_mut().zip(grads) {
            acc.axpy_(1.0, &grad)?;
        }
        Ok(())
    }

    /// Drops the gradient and the group gradients (PyTorch's default
    /// `zero_grad(set_to_none=True)`).
    pub fn zero_grad(&mut self) {
        self.grad = None;
        self.group_grads.clear();
    }
}

/// A layer (or a stack of layers) with a hand-written backward.
///
/// `Send` so a model can move to another thread (e.g. a benchmark harness).
pub trait Module: Send {
    /// Runs the layer. With `train = true` the layer saves what `backward` needs and
    /// random layers (dropout) draw from their generator; with `train = false` nothing is
    /// saved and no random number is consumed.
    fn forward(&mut self, input: &Tensor, train: bool) -> Result<Tensor>;

    /// Given the gradient of the loss with respect to the last `forward`'s output,
    /// accumulates parameter gradients and returns the gradient with respect to its
    /// input. Consumes the saved forward state: a second call errors.
    fn backward(&mut self, grad_output: &Tensor) -> Result<Tensor>;

    /// [`backward`](Module::backward) for a caller that has no use for the input
    /// gradient (the first layer of a model, whose input is data): parameter gradients
    /// are accumulated the same way, but layers may skip computing the input gradient,
    /// as PyTorch's autograd does for inputs that do not require grad. For the first
    /// `Linear` of the demo MLP that is one 128 x 256 x 64 matmul per step.
    fn backward_params(&mut self, grad_output: &Tensor) -> Result<()> {
        self.backward(grad_output).map(drop)
    }

    /// [`backward_params`](Module::backward_params) that calls `ready(first, params)`
    /// as soon as the gradients of some parameters are final: `params` are parameters
    /// `first..first + params.len()` of [`parameters`](Module::parameters), numbered
    /// from `offset`. A data-parallel wrapper starts summing a bucket across ranks once
    /// all of its parameters were reported, while the rest of the backward runs
    /// (PyTorch DDP's gradient-ready hooks; there is no autograd tape to hook here).
    /// The default reports every parameter once, at the end; [`Sequential`] reports
    /// layer by layer. An error from `ready` ends the backward with it.
    ///
    /// [`Sequential`]: crate::Sequential
    fn backward_params_notify(
        &mut self,
        grad_output: &Tensor,
        offset: usize,
        ready: &mut dyn FnMut(usize, &[&Parameter]) -> Result<()>,
    ) -> Result<()> {
        self.backward_params(grad_output)?;
        ready(offset, &self.parameters())
    }

    /// Calls `f(full name, parameter)` for every parameter, in a fixed order; the full
    /// name is `prefix` followed by the name within this layer. This is the one place a
    /// layer declares what it owns: [`parameters`](Module::parameters),
    /// [`named_parameters`](Module::named_parameters), their `_mut` twins and
    /// [`zero_grad`](Module::zero_grad) are all built on it and its mutable twin, so the
    /// names and order that checkpoints and optimiser state are keyed by cannot drift
    /// apart between the accessors (PyTorch's `named_parameters(prefix)` recursion).
    ///
    /// A leaf layer names its parameters `{prefix}{Parameter::name}`; a container hands
    /// each child its own prefix (`{prefix}0.`, `{prefix}attn.`), giving PyTorch's
    /// `state_dict` names. The default visits nothing, like a PyTorch module that
    /// registers nothing: a layer without parameters (`ReLU`, `Dropout`) writes neither
    /// visitor. A layer that owns parameters, or holds layers that do, must override
    /// both, or the optimiser never updates them and checkpoints never save them;
    /// `crates/nn-mini/tests/integration/parameter_overrides.rs` fails for any `impl
    /// Module` in the workspace that holds a [`Parameter`] or a `dyn Module` and does not.
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        let _ = (prefix, f);
    }

    /// Mutable twin of [`visit_parameters`](Module::visit_parameters): the same names in
    /// the same order (a separate method because Rust cannot lend `&` and `&mut` through
    /// one signature).
    fn visit_parameters_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        let _ = (prefix, f);
    }

    /// The parameters, in the order of [`named_parameters`](Module::named_parameters).
    /// Provided by [`visit_parameters`](Module::visit_parameters): override that instead.
    fn parameters(&self) -> Vec<&Parameter> {
        let mut params = Vec::new();
        self.visit_parameters("", &mut |_, p| params.push(p));
        params
    }

    /// The parameters, mutably, in the same order as [`Module::parameters`].
    fn parameters_mut(&mut self) -> Vec<&mut Parameter> {
        let mut params = Vec::new();
        self.visit_parameters_mut("", &mut |_, p| params.push(p));
        params
    }

    /// `(full name, parameter)` pairs: the names checkpoints and optimiser state use.
    fn named_parameters(&self) -> Vec<(String, &Parameter)> {
        let mut params = Vec::new();
        self.visit_parameters("", &mut |name, p| params.push((name, p)));
        params
    }

    /// Mutable twin of [`Module::named_parameters`], same names, same order.
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Parameter)> {
        let mut params = Vec::new();
        self.visit_parameters_mut("", &mut |name, p| params.push((name, p)));
        params
    }

    /// Tells the layer which rows of a global batch the following forward passes
    /// compute (`None`: the input is the whole batch, the default). Random layers
    /// ([`Dropout`](crate::Dropout)) use it to draw each row's randomness at its global
    /// position, so a data parallel rank's rows get what a single process gives them
    /// (see [`GlobalRows`]); other layers ignore it, and containers pass it on.
    fn set_global_rows(&mut self, rows: Option<&GlobalRows>) {
        let _ = rows;
    }

    /// Whether this layer (and every layer inside it) honours
    /// [`set_grad_row_groups`](Module::set_grad_row_groups): its parameter gradient for
    /// a group of rows is computed from those rows alone, with the very ops a backward
    /// over just those rows would run (so the bits are the same), and each row's input
    /// gradient depends on that row alone whenever the arithmetic makes it so (portable
    /// arithmetic, docs/contract.md §14). The default is `false`, so a layer written
    /// before this existed (or one that mixes rows, like a batch norm) makes callers
    /// fall back to one backward per group; containers answer for all their layers.
    fn supports_grad_row_groups(&self) -> bool {
        false
    }

    /// Tells the layer to split its following backward passes' parameter gradients by
    /// the row groups given (`None`: one gradient for the batch, the default), adding
    /// group `g`'s into [`Parameter::group_grads`]`[g]` instead of
    /// [`Parameter::grad`] (see [`GradRowGroups`]). The input gradient is still one
    /// tensor for the whole batch. Only meaningful where
    /// [`supports_grad_row_groups`](Module::supports_grad_row_groups) is true; containers
    /// pass it on.
    fn set_grad_row_groups(&mut self, groups: Option<&GradRowGroups>) {
        let _ = groups;
    }

    /// Places what [`forward`](Module::forward) reads of `input` beyond the tensor itself
    /// in device buffers that stay put, so that a CUDA graph captured over `forward(input)`
    /// reads the next input there once this is called with it: an embedding's checked
    /// token ids ([`Embedding`](crate::Embedding)). A model whose input is a device tensor
    /// (the graph step refills that tensor itself) has nothing to stage: the default.
    fn stage_graph_input(&mut self, input: &Tensor) -> Result<()> {
        let _ = input;
        Ok(())
    }

    /// Clears every parameter's gradient before the next backward.
    fn zero_grad(&mut self) {
        self.visit_parameters_mut("", &mut |_, p| p.zero_grad());
    }
}

/// What a leaf layer's [`Module::visit_parameters`] does: each of its own `params`, in
/// order, named `prefix` followed by its local name (`0.` + `weight`). Layers written
/// outside this crate call it too, so every leaf names its parameters alike.
pub fn visit_leaf<'a>(
    prefix: &str,
    params: impl IntoIterator<Item = &'a Parameter>,
    f: &mut dyn FnMut(String, &'a Parameter),
) {
    for p in params {
        f(format!("{prefix}{}", p.name), p);
    }
}

/// Mutable twin of [`visit_leaf`], for [`Module::visit_parameters_mut`].
pub fn visit_leaf_mut<'a>(
    prefix: &str,
    params: impl IntoIterator<Item = &'a mut Parameter>,
    f: &mut dyn FnMut(String, &'a mut Parameter),
) {
    for p in params {
        f(format!("{prefix}{}", p.name), p);
    }
}

/// [`Module::visit_parameters`] and [`Module::visit_parameters_mut`] of a leaf layer
/// whose parameters are its fields `weight: Parameter` and `bias: Option<Parameter>`, in
/// that order ([`Linear`](crate::Linear), [`LayerNorm`](crate::LayerNorm)): written
/// once, expanded inside each `impl Module`.
macro_rules! visit_weight_and_bias {
    () => {
        fn visit_parameters<'a>(
            &'a self,
            prefix: &str,
            f: &mut dyn FnMut(String, &'a $crate::Parameter),
        ) {
            let params = std::iter::once(&self.weight).chain(&self.bias);
            $crate::visit_leaf(prefix, params, f);
        }

        fn visit_parameters_mut<'a>(
            &'a mut self,
            prefix: &str,
            f: &mut dyn FnMut(String, &'a mut $crate::Parameter),
        ) {
            let params = std::iter::once(&mut self.weight).chain(&mut self.bias);
            $crate::visit_leaf_mut(prefix, params, f);
        }
    };
}
pub(crate) use visit_weight_and_bias;
