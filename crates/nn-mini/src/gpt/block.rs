//! GPT-2's transformer block (pre-LayerNorm, residual connections) and its MLP, with
//! nanoGPT's names (`ln_1`, `attn`, `ln_2`, `mlp.c_fc`, `mlp.c_proj`).

use rng_gen::Generator;
use tensor_core::Tensor;

use super::CausalSelfAttention;
use crate::{Dropout, GlobalRows, LayerNorm, Linear, Module, NnError, Parameter, Result};

/// `dropout(c_proj(gelu(c_fc(x))))` over `[batch, t, width]`, the hidden layer 4 times
/// the width (nanoGPT's `MLP`). `c_fc`'s bias is added inside GELU's pass
/// ([`Tensor::bias_gelu_tanh`]): the same bits as adding it first, one pass over the
/// hidden activations fewer each way.
#[derive(Debug)]
pub struct Mlp {
    c_fc: Linear,
    c_proj: Linear,
    dropout: Dropout,
    /// `x W^T` of `c_fc` (before its bias) from the last training forward, GELU's
    /// backward's input.
    product: Option<Tensor>,
    dims: Option<[usize; 3]>,
}

impl Mlp {
    /// The MLP from its two layers (`c_fc`: `[hidden, width]`, `c_proj`: `[width,
    /// hidden]`) with dropout `p` on its output, drawn from `dropout_generator`.
    pub fn new(
        c_fc: Linear,
        c_proj: Linear,
        p: f64,
        dropout_generator: &Generator,
    ) -> Result<Self> {
        let (fc, proj) = (c_fc.weight().value.dims(), c_proj.weight().value.dims());
        if fc[0] != proj[1] || fc[1] != proj[0] {
            return Err(NnError::invalid(
                "Mlp::new",
                format!("c_fc {fc:?} and c_proj {proj:?} do not chain: expected [hidden, width] and [width, hidden]"),
            ));
        }
        Ok(Mlp {
            c_fc,
            c_proj,
            dropout: Dropout::new(p, dropout_generator)?,
            product: None,
            dims: None,
        })
    }
}

impl Module for Mlp {
    fn forward(&mut self, input: &Tensor, train: bool) -> Result<Tensor> {
        let [b, t, c] = three_dims("Mlp::forward", input)?;
        let product = self
            .c_fc
            .forward_product(&input.reshape(&[b * t, c])?, train)?;
        let h = match self.c_fc.bias() {
            Some(bias) => product.bias_gelu_tanh(&bias.value)?,
            None => product.gelu_tanh()?,
        };
        let out = self.c_proj.forward(&h, train)?.reshape(&[b, t, c])?;
        self.product = train.then_some(product);
        self.dims = train.then_some([b, t, c]);
        self.dropout.forward(&out, train)
    }

    fn backward(&mut self, grad_output: &Tensor) -> Result<Tensor> {
        let [b, t, c] = self
            .dims
            .take()
            .ok_or(NnError::BackwardWithoutForward { layer: "Mlp" })?;
        let g = self.dropout.backward(grad_output)?;
        let g = self.c_proj.backward(&g.reshape(&[b * t, c])?)?;
        let product = self
            .product
            .take()
            .ok_or(NnError::BackwardWithoutForward { layer: "Mlp" })?;
        let g = match self.c_fc.bias() {
            Some(bias) => Tensor::bias_gelu_tanh_backward(&g, &product, &bias.value)?,
            None => Tensor::gelu_tanh_backward(&g, &product)?,
        };
        Ok(self.c_fc.backward(&g)?.reshape(&[b, t, c])?)
    }

    fn set_global_rows(&mut self, rows: Option<&GlobalRows>) {
        self.dropout.set_global_rows(rows);
    }

    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        self.c_fc.visit_parameters(&format!("{prefix}c_fc."), f);
        self.c_proj.visit_parameters(&format!("{prefix}c_proj."), f);
    }

    fn visit_parameters_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        self.c_fc.visit_parameters_mut(&format!("{prefix}c_fc."), f);
        self.c_proj
            .visit_parameters_mut(&format!("{prefix}c_proj."), f);
    }
}

/// The `[batch, t, width]` dims of a block's input.
pub(super) fn three_dims(op: &'static str, x: &Tensor) -> Result<[usize; 3]> {
    match *x.dims() {
        [b, t, c] => Ok([b, t, c]),
        _ => Err(NnError::invalid(
            op,
            format!("expected a [batch, t, width] input, got {:?}", x.dims()),
        )),
    }
}

/// `x + attn(ln_1(x))`, then `h + mlp(ln_2(h))`: a pre-LayerNorm residual block.
#[derive(Debug)]
pub struct Block {
    pub(super) ln_1: LayerNorm,
    pub(super) attn: CausalSelfAttention,
    pub(super) ln_2: LayerNorm,
    pub(super) mlp: Mlp,
}

impl Block {
    /// The block from its four parts.
    #[must_use]
    pub fn new(ln_1: LayerNorm, attn: CausalSelfAttention, ln_2: LayerNorm, mlp: Mlp) -> Self {
        Block {
            ln_1,
            attn,
            ln_2,
            mlp,
        }
    }
}

impl Module for Block {
    fn forward(&mut self, input: &Tensor, train: bool) -> Result<Tensor> {
        let a = self
            .attn
            .forward(&self.ln_1.forward(input, train)?, train)?;
        let h = input.add(&a)?;
        let m = self.mlp.forward(&self.ln_2.forward(&h, train)?, train)?;
        Ok(h.add(&m)?)
    }

    /// The residual sums pass the gradient through unchanged and add each branch's.
    fn backward(&mut self, grad_output: &Tensor) -> Result<Tensor> {
        let through_mlp = self.ln_2.backward(&self.mlp.backward(grad_output)?)?;
        let grad_h = grad_output.add(&through_mlp)?;
        let through_attn = self.ln_1.backward(&self.attn.backward(&grad_h)?)?;
        Ok(grad_h.add(&through_attn)?)
    }

    fn set_global_rows(&mut self, rows: Option<&GlobalRows>) {
        self.attn.set_global_rows(rows);
        self.mlp.set_global_rows(rows);
    }

    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        self.ln_1.visit_parameters(&format!("{prefix}ln_1."), f);
        self.attn.visit_parameters(&format!("{prefix}attn."), f);
        self.ln_2.visit_parameters(&format!("{prefix}ln_2."), f);
        self.mlp.visit_parameters(&format!("{prefix}mlp."), f);
    }

    fn visit_parameters_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        self.ln_1.visit_parameters_mut(&format!("{prefix}ln_1."), f);
        self.attn.visit_parameters_mut(&format!("{prefix}attn."), f);
        self.ln_2.visit_parameters_mut(&format!("{prefix}ln_2."), f);
        self.mlp.visit_parameters_mut(&format!("{prefix}mlp."), f);
    }
}
