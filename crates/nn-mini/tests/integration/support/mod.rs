//! Helpers shared by nn-mini's integration tests (a test file that needs them declares
//! `mod support;`), so a step every test takes is written once.
#![allow(dead_code)]

use nn_mini::{Module, Parameter};
use tensor_core::Tensor;

/// The f32 gradient a backward accumulated into `param` (the test fails if none did).
pub fn grad_values(param: &Parameter) -> Vec<f32> {
    param
        .grad
        .as_ref()
        .expect("a backward set the gradient")
        .to_vec::<f32>()
        .expect("an f32 gradient")
}

/// A module that is nothing but parameters (forward and backward pass their input
/// through), so tests can set gradients directly; written without row groups in mind,
/// it answers with the `Module` trait's defaults there (no row-group support).
pub struct ParamsOnly(pub Vec<Parameter>);

impl Module for ParamsOnly {
    fn forward(&mut self, input: &Tensor, _train: bool) -> nn_mini::Result<Tensor> {
        Ok(input.clone())
    }
    fn backward(&mut self, grad_output: &Tensor) -> nn_mini::Result<Tensor> {
        Ok(grad_output.clone())
    }
    fn parameters(&self) -> Vec<&Parameter> {
        self.0.iter().collect()
    }
    fn parameters_mut(&mut self) -> Vec<&mut Parameter> {
        self.0.iter_mut().collect()
    }
}
