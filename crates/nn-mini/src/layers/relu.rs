//! `ReLU`: `max(x, 0)`.

use tensor_core::Tensor;

use crate::{Module, NnError, Result};

/// The rectifier. Backward passes the gradient where the forward input was positive
/// (the gradient at exactly 0 is 0, as in PyTorch).
#[derive(Debug, Default)]
pub struct ReLU {
    saved_input: Option<Tensor>,
}

impl ReLU {
    /// A new ReLU layer.
    #[must_use]
    pub fn new() -> Self {
        ReLU::default()
    }
}

impl Module for ReLU {
    fn forward(&mut self, input: &Tensor, train: bool) -> Result<Tensor> {
        self.saved_input = train.then(|| input.clone());
        Ok(input.relu()?)
    }

    fn backward(&mut self, grad_output: &Tensor) -> Result<Tensor> {
        let input = self
            .saved_input
            .take()
            .ok_or(NnError::BackwardWithoutForward { layer: "ReLU" })?;
        Ok(Tensor::relu_backward(grad_output, &input)?)
    }

    /// Elementwise, without parameters: nothing to split, and each row's input gradient
    /// is its own.
    fn supports_grad_row_groups(&self) -> bool {
        true
    }
}
