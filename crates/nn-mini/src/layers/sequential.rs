//! `Sequential`: layers applied in order, gradients propagated in reverse.

use tensor_core::Tensor;

use crate::{GlobalRows, GradRowGroups, Module, Parameter, Result};

/// A stack of modules. Parameter names are prefixed with the layer's index (`0.weight`,
/// `3.bias`), exactly as in PyTorch's `nn.Sequential`, so a checkpoint's tensors map
/// one to one onto a PyTorch model built the same way.
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Module>>,
}

impl std::fmt::Debug for Sequential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sequential")
            .field("layers", &self.layers.len())
            .finish()
    }
}

impl Sequential {
    /// An empty stack (the identity).
    #[must_use]
    pub fn new() -> Self {
        Sequential::default()
    }

    /// Appends a layer; returns `self` for chaining.
    #[must_use]
    pub fn push(mut self, layer: impl Module + 'static) -> Self {
        self.layers.push(Box::new(layer));
        self
    }

    /// Appends an already boxed layer.
    pub fn push_boxed(&mut self, layer: Box<dyn Module>) {
        self.layers.push(layer);
    }

    /// Number of layers.
    #[must_use]
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// True when there are no layers.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
}

impl Module for Sequential {
    fn forward(&mut self, input: &Tensor, train: bool) -> Result<Tensor> {
        let mut x = input.clone();
        for layer in &mut self.layers {
            x = layer.forward(&x, train)?;
        }
        Ok(x)
    }

    fn backward(&mut self, grad_output: &Tensor) -> Result<Tensor> {
        let mut g = grad_output.clone();
        for layer in self.layers.iter_mut().rev() {
            g = layer.backward(&g)?;
        }
        Ok(g)
    }

    fn backward_params(&mut self, grad_output: &Tensor) -> Result<()> {
        let Some((first, rest)) = self.layers.split_first_mut() else {
            return Ok(());
        };
        let mut g = grad_output.clone();
        for layer in rest.iter_mut().rev() {
            g = layer.backward(&g)?;
        }
        first.backward_params(&g)
    }

    /// Reports each layer's parameters as soon as its backward ran (the last layer's
    /// first), so the reduction of the last buckets can start before the first layers'
    /// backward.
    fn backward_params_notify(
        &mut self,
        grad_output: &Tensor,
        offset: usize,
        ready: &mut dyn FnMut(usize, &[&Parameter]) -> Result<()>,
    ) -> Result<()> {
        let mut starts = Vec::with_capacity(self.layers.len());
        let mut next = offset;
        for layer in &self.layers {
            starts.push(next);
            next += layer.parameters().len();
        }
        let Some((first, rest)) = self.layers.split_first_mut() else {
            return Ok(());
        };
        let mut g = grad_output.clone();
        for (i, layer) in rest.iter_mut().enumerate().rev() {
            g = layer.backward(&g)?;
            ready(starts[i + 1], &layer.parameters())?;
        }
        first.backward_params_notify(&g, starts[0], ready)
    }

    fn set_global_rows(&mut self, rows: Option<&GlobalRows>) {
        for layer in &mut self.layers {
            layer.set_global_rows(rows);
        }
    }

    /// True when every layer supports row groups (an empty stack trivially does).
    fn supports_grad_row_groups(&self) -> bool {
        self.layers.iter().all(|l| l.supports_grad_row_groups())
    }

    fn set_grad_row_groups(&mut self, groups: Option<&GradRowGroups>) {
        for layer in &mut self.layers {
            layer.set_grad_row_groups(groups);
        }
    }

    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        for (i, layer) in self.layers.iter().enumerate() {
            layer.visit_parameters(&format!("{prefix}{i}."), f);
        }
    }

    fn visit_parameters_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        for (i, layer) in self.layers.iter_mut().enumerate() {
            layer.visit_parameters_mut(&format!("{prefix}{i}."), f);
        }
    }
}
