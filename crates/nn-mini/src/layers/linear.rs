//! `Linear`: `y = x W^T + b`, initialised like PyTorch's `nn.Linear`.

use rng_gen::Generator;
use tensor_core::{DType, Tensor};

use crate::module::visit_weight_and_bias;
use crate::{GradRowGroups, Module, NnError, Parameter, Result};

/// A fully connected layer with weight `[out_features, in_features]` (PyTorch's layout,
/// so checkpoints load into `nn.Linear` unchanged) and an optional bias `[out_features]`.
///
/// Initialisation is PyTorch's default: `kaiming_uniform_(a = sqrt(5))`, which works out
/// to `W ~ U(-1/sqrt(in), 1/sqrt(in))`, and `b ~ U(-1/sqrt(in), 1/sqrt(in))`. Both are
/// drawn from the [`Generator`] given (weight first, then bias), so the same generator
/// state gives the same layer on any device and thread count.
#[derive(Debug)]
pub struct Linear {
    weight: Parameter,
    bias: Option<Parameter>,
    /// The input of the last training forward, for the weight gradient.
    saved_input: Option<Tensor>,
    /// Row groups whose parameter gradients backward keeps apart (see [`GradRowGroups`]).
    row_groups: Option<GradRowGroups>,
}

impl Linear {
    /// An f32 layer with a bias on `generator`'s device.
    pub fn new(in_features: usize, out_features: usize, generator: &Generator) -> Result<Self> {
        Linear::with_options(in_features, out_features, true, DType::F32, generator)
    }

    /// A layer with or without bias and in `dtype` (f32 or f64; f64 is what gradient
    /// checks use).
    pub fn with_options(
        in_features: usize,
        out_features: usize,
        bias: bool,
        dtype: DType,
        generator: &Generator,
    ) -> Result<Self> {
        if in_features == 0 || out_features == 0 {
            return Err(NnError::invalid(
                "Linear::new",
                format!("features must be positive, got in = {in_features}, out = {out_features}"),
            ));
        }
        let bound = 1.0 / (in_features as f64).sqrt();
        let device = generator.device();
        let draw =
            |dims: &[usize]| rng_gen::uniform(dims, -bound, bound, dtype, device, Some(generator));
        let weight = Parameter::new("weight", draw(&[out_features, in_features])?);
        let bias = if bias {
            Some(Parameter::new("bias", draw(&[out_features])?))
        } else {
            None
        };
        Ok(Linear {
            weight,
            bias,
            saved_input: None,
            row_groups: None,
        })
    }

    /// A layer with given weight `[out, in]` and optional bias `[out]` (for tests and for
    /// porting weights from elsewhere).
    pub fn from_tensors(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        if weight.rank() != 2 {
            return Err(NnError::invalid(
                "Linear::from_tensors",
                format!("weight must be 2-D [out, in], got {:?}", weight.dims()),
            ));
        }
        if let Some(b) = &bias {
            if b.dims() != [weight.dims()[0]] || b.dtype() != weight.dtype() {
                return Err(NnError::invalid(
                    "Linear::from_tensors",
                    format!(
                        "bias must be [{}] of {}, got {:?} of {}",
                        weight.dims()[0],
                        weight.dtype(),
                        b.dims(),
                        b.dtype()
                    ),
                ));
            }
        }
        Ok(Linear {
            weight: Parameter::new("weight", weight),
            bias: bias.map(|b| Parameter::new("bias", b)),
            saved_input: None,
            row_groups: None,
        })
    }

    /// The weight `[out, in]`.
    #[must_use]
    pub fn weight(&self) -> &Parameter {
        &self.weight
    }

    /// The bias `[out]`, if the layer has one.
    #[must_use]
    pub fn bias(&self) -> Option<&Parameter> {
        self.bias.as_ref()
    }
}

impl Linear {
    /// The parameter gradients of each row group: for group rows `g_s`, `x_s`, the very
    /// ops a backward over those rows alone runs (`g_s^T x_s`, the sum of `g_s` over rows),
    /// so each group's bits equal that backward's. An empty group's are zeros.
    fn backward_params_grouped(
        &mut self,
        grad_output: &Tensor,
        input: &Tensor,
        groups: &GradRowGroups,
    ) -> Result<()> {
        const OP: &str = "Linear::backward";
        let grads = groups.split(grad_output, OP)?;
        let inputs = groups.split(input, OP)?;
        let weight = &self.weight.value;
        let mut grad_weights = Vec::with_capacity(groups.len());
        let mut grad_biases = Vec::with_capacity(groups.len());
        for (g, x) in grads.iter().zip(&inputs) {
            let empty = g.dims()[0] == 0;
            let zeros = |dims: &[usize]| Tensor::zeros(dims, weight.dtype(), weight.device());
            grad_weights.push(match empty {
                true => zeros(weight.dims())?,
                false => g.t()?.matmul(x)?,
            });
            if self.bias.is_some() {
                grad_biases.push(match empty {
                    true => zeros(&[weight.dims()[0]])?,
                    false => g.sum_dim(0, false)?,
                });
            }
        }
        self.weight.accumulate_group_grads(grad_weights)?;
        if let Some(bias) = &mut self.bias {
            bias.accumulate_group_grads(grad_biases)?;
        }
        Ok(())
    }
}

impl Linear {
    /// `x W^T` without the bias, keeping what [`Module::backward`] needs as `forward`
    /// does: for a caller that adds the bias in its next op's pass (the GPT's MLP adds
    /// it inside GELU, [`Tensor::bias_gelu_tanh`]). The backward is the same either way.
    pub fn forward_product(&mut self, input: &Tensor, train: bool) -> Result<Tensor> {
        if input.rank() != 2 {
            return Err(NnError::invalid(
                "Linear::forward",
                format!("expected a [batch, in] input, got {:?}", input.dims()),
            ));
        }
        let out = input.matmul(&self.weight.value.t()?)?;
        self.saved_input = train.then(|| input.clone());
        Ok(out)
    }
}

impl Module for Linear {
    fn forward(&mut self, input: &Tensor, train: bool) -> Result<Tensor> {
        let mut out = self.forward_product(input, train)?;
        if let Some(bias) = &self.bias {
            // In place: a fresh matmul output is not shared, so nothing is copied.
            out.add_(&bias.value)?;
        }
        Ok(out)
    }

    fn backward(&mut self, grad_output: &Tensor) -> Result<Tensor> {
        self.backward_params(grad_output)?;
        // dL/dx = g W.
        Ok(grad_output.matmul(&self.weight.value)?)
    }

    fn backward_params(&mut self, grad_output: &Tensor) -> Result<()> {
        let input = self
            .saved_input
            .take()
            .ok_or(NnError::BackwardWithoutForward { layer: "Linear" })?;
        if let Some(groups) = self.row_groups.clone() {
            return self.backward_params_grouped(grad_output, &input, &groups);
        }
        // dL/dW = g^T x, dL/db = sum over the batch of g.
        let grad_weight = grad_output.t()?.matmul(&input)?;
        self.weight.accumulate_grad(grad_weight)?;
        if let Some(bias) = &mut self.bias {
            bias.accumulate_grad(grad_output.sum_dim(0, false)?)?;
        }
        Ok(())
    }

    fn supports_grad_row_groups(&self) -> bool {
        true
    }

    fn set_grad_row_groups(&mut self, groups: Option<&GradRowGroups>) {
        self.row_groups = groups.cloned();
    }

    visit_weight_and_bias!();
}
