//! Helpers shared by nn-mini's integration tests (a test file that needs them declares
//! `mod support;`), so a step every test takes is written once.
#![allow(dead_code)]

use nn_mini::Parameter;

/// The f32 gradient a backward accumulated into `param` (the test fails if none did).
pub fn grad_values(param: &Parameter) -> Vec<f32> {
    param
        .grad
        .as_ref()
        .expect("a backward set the gradient")
        .to_vec::<f32>()
        .expect("an f32 gradient")
}
