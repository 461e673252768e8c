//! `LayerNorm`: PyTorch's `nn.LayerNorm` over the last dimension.

use tensor_core::{DType, Device, Tensor};

use crate::module::visit_weight_and_bias;
use crate::{Module, NnError, Parameter, Result};

/// Normalises each row of `[..., width]` over its last dimension to zero mean and unit
/// variance, then scales by `weight` and shifts by `bias` (both `[width]`, initialised
/// to ones and zeros as in PyTorch; the bias is optional, as nanoGPT's `bias=False`).
/// The arithmetic is [`Tensor::layer_norm`]'s: the same bits on every device.
#[derive(Debug)]
pub struct LayerNorm {
    weight: Parameter,
    bias: Option<Parameter>,
    eps: f64,
    /// The input, mean and rstd of the last training forward.
    saved: Option<(Tensor, Tensor, Tensor)>,
}

impl LayerNorm {
    /// `nn.LayerNorm(width)` in f32 on `device`: weight 1, bias 0, eps 1e-5.
    pub fn new(width: usize, device: Device) -> Result<Self> {
        LayerNorm::with_options(width, true, 1e-5, DType::F32, device)
    }

    /// A layer norm with or without bias, with `eps` (finite, `>= 0`), in `dtype` (f32
    /// or f64; gradient checks use f64).
    pub fn with_options(
        width: usize,
        bias: bool,
        eps: f64,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        if width == 0 || !(eps.is_finite() && eps >= 0.0) {
            return Err(NnError::invalid(
                "LayerNorm::new",
                format!(
                    "width must be positive and eps finite and >= 0, got width {width}, eps {eps}"
                ),
            ));
        }
        let weight = Tensor::ones(&[width], dtype, device)?;
        let bias = bias
            .then(|| Tensor::zeros(&[width], dtype, device))
            .transpose()?;
        LayerNorm::from_tensors(weight, bias, eps)
    }

    /// A layer norm with the given `weight` and optional `bias` (`[width]`, one float
    /// dtype).
    pub fn from_tensors(weight: Tensor, bias: Option<Tensor>, eps: f64) -> Result<Self> {
        let width = weight.dims().first().copied().unwrap_or(0);
        let bias_ok = bias
            .as_ref()
            .is_none_or(|b| b.dims() == [width] && b.dtype() == weight.dtype());
        if weight.rank() != 1 || width == 0 || !weight.dtype().is_float() || !bias_ok {
            return Err(NnError::invalid(
                "LayerNorm::from_tensors",
                format!(
                    "weight must be a non-empty 1-D float tensor and bias one like it, got {:?} of {} and {:?}",
                    weight.dims(),
                    weight.dtype(),
                    bias.as_ref().map(|b| (b.dims().to_vec(), b.dtype()))
                ),
            ));
        }
        Ok(LayerNorm {
            weight: Parameter::new("weight", weight),
            bias: bias.map(|b| Parameter::new("bias", b)),
            eps,
            saved: None,
        })
    }
}

impl Module for LayerNorm {
    fn forward(&mut self, input: &Tensor, train: bool) -> Result<Tensor> {
        let bias = self.bias.as_ref().map(|b| &b.value);
        let (out, mean, rstd) = input.layer_norm(Some(&self.weight.value), bias, self.eps)?;
        self.saved = train.then(|| (input.clone(), mean, rstd));
        Ok(out)
    }

    fn backward(&mut self, grad_output: &Tensor) -> Result<Tensor> {
        let (input, mean, rstd) = self
            .saved
            .take()
            .ok_or(NnError::BackwardWithoutForward { layer: "LayerNorm" })?;
        let (dx, dw, db) = Tensor::layer_norm_backward(
            grad_output,
            &input,
            &mean,
            &rstd,
            Some(&self.weight.value),
        )?;
        self.weight.accumulate_grad(dw)?;
        if let Some(bias) = &mut self.bias {
            bias.accumulate_grad(db)?;
        }
        Ok(dx)
    }

    visit_weight_and_bias!();
}
