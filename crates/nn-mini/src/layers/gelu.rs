//! `Gelu`: GPT-2's activation, GELU with the tanh approximation.

use tensor_core::Tensor;

use crate::{Module, NnError, Result};

/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, elementwise: PyTorch's
/// `nn.GELU(approximate="tanh")` ([`Tensor::gelu_tanh`]). Only the tanh approximation
/// exists here, so the constructor names it.
#[derive(Debug, Default)]
pub struct Gelu {
    saved_input: Option<Tensor>,
}

impl Gelu {
    /// GELU with the tanh approximation.
    #[must_use]
    pub fn tanh() -> Self {
        Gelu::default()
    }
}

impl Module for Gelu {
    fn forward(&mut self, input: &Tensor, train: bool) -> Result<Tensor> {
        self.saved_input = train.then(|| input.clone());
        Ok(input.gelu_tanh()?)
    }

    fn backward(&mut self, grad_output: &Tensor) -> Result<Tensor> {
        let input = self
            .saved_input
            .take()
            .ok_or(NnError::BackwardWithoutForward { layer: "Gelu" })?;
        Ok(Tensor::gelu_tanh_backward(grad_output, &input)?)
    }

    /// Elementwise, without parameters: each row's input gradient is its own.
    fn supports_grad_row_groups(&self) -> bool {
        true
    }
}
