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
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        for p in &self.0 {
            f(format!("{prefix}{}", p.name), p);
        }
    }
    fn visit_parameters_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        for p in &mut self.0 {
            f(format!("{prefix}{}", p.name), p);
        }
    }
}
