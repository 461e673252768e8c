//! `Gpt`: GPT-2's decoder (nanoGPT's `GPT`): token and position embeddings, blocks,
//! a final layer norm, and an output head tied to the token embedding.

use rng_gen::Generator;
use tensor_core::{DType, Device, Tensor};

use super::{Block, CausalSelfAttention, GptConfig, Mlp};
use crate::{
    visit_leaf, visit_leaf_mut, Dropout, Embedding, GlobalRows, LayerNorm, Linear, Module, NnError,
    Parameter, Result,
};

/// nanoGPT's initialisation: `N(0, 0.02)` for every weight matrix and embedding, `N(0,
/// 0.02 / sqrt(2 n_layer))` for the residual projections (`c_proj.weight`), zeros for
/// biases, ones and zeros for the layer norms.
const INIT_STD: f64 = 0.02;

/// What the output head's backward needs: the final layer norm's output as rows.
#[derive(Debug)]
struct SavedHead {
    hidden: Tensor,
    dims: [usize; 3],
}

/// A GPT over token indices `[batch, t]` (i64, `t <= block_size`), giving logits
/// `[batch, t, vocab_size]`:
///
/// ```text
/// x = drop(wte[idx] + wpe[0..t])
/// x = block(x)  for each of n_layer blocks
/// logits = ln_f(x) wte^T                 (lm_head, tied to the token embedding)
/// ```
///
/// Parameters are named as nanoGPT's `state_dict` names them
/// ([`GptConfig::parameter_shapes`]), with PyTorch's `[out, in]` layout, so a checkpoint
/// loads into nanoGPT's `GPT` by name; the tied head is `transformer.wte.weight`, listed
/// once, and both of its uses add into its one gradient.
#[derive(Debug)]
pub struct Gpt {
    config: GptConfig,
    pub(super) wte: Embedding,
    pub(super) wpe: Parameter,
    drop: Dropout,
    pub(super) blocks: Vec<Block>,
    pub(super) ln_f: LayerNorm,
    saved: Option<SavedHead>,
    /// Zeros for the position rows past the context, `[block_size - t, width]`: their
    /// gradient every step, written once (a step on a GPU then sets no memory).
    wpe_tail_zeros: Option<Tensor>,
}

impl Gpt {
    /// An f32 model of `config` on `init`'s device, initialised as nanoGPT initialises
    /// (drawn from `init` in parameter order), its dropout layers drawing from
    /// `dropout_generator`.
    pub fn new(
        config: &GptConfig,
        init: &Generator,
        dropout_generator: &Generator,
    ) -> Result<Self> {
        Gpt::with_dtype(config, DType::F32, init, dropout_generator)
    }

    /// [`Gpt::new`] in `dtype` (f32, or f64 for gradient checks): the weights are the f32
    /// model's draws, converted.
    pub fn with_dtype(
        config: &GptConfig,
        dtype: DType,
        init: &Generator,
        dropout_generator: &Generator,
    ) -> Result<Self> {
        config.validate()?;
        let device = init.device();
        let normal = |dims: &[usize], std: f64| -> Result<Tensor> {
            let z = rng_gen::randn(dims, DType::F32, device, Some(init))?;
            Ok(z.mul_scalar(std)?.to_dtype(dtype)?)
        };
        let zeros = |n: usize| Tensor::zeros(&[n], dtype, device);
        let bias = config.bias;
        let (c, p) = (config.n_embd, config.dropout);
        let projection_std = INIT_STD / ((2 * config.n_layer) as f64).sqrt();
        let wte = Embedding::from_weight(normal(&[config.vocab_size, c], INIT_STD)?)?;
        let wpe = Parameter::new("weight", normal(&[config.block_size, c], INIT_STD)?);
        let mut blocks = Vec::with_capacity(config.n_layer);
        for _ in 0..config.n_layer {
            let linear = |out: usize, inp: usize, std: f64| -> Result<Linear> {
                let b = if bias { Some(zeros(out)?) } else { None };
                Linear::from_tensors(normal(&[out, inp], std)?, b)
            };
            let c_attn = linear(3 * c, c, INIT_STD)?;
            let attn_proj = linear(c, c, projection_std)?;
            let c_fc = linear(4 * c, c, INIT_STD)?;
            let mlp_proj = linear(c, 4 * c, projection_std)?;
            let attn =
                CausalSelfAttention::new(c_attn, attn_proj, config.n_head, p, dropout_generator)?;
            let mlp = Mlp::new(c_fc, mlp_proj, p, dropout_generator)?;
            let layer_norm = || LayerNorm::with_options(c, bias, 1e-5, dtype, device);
            blocks.push(Block::new(layer_norm()?, attn, layer_norm()?, mlp));
        }
        Ok(Gpt {
            config: *config,
            wte,
            wpe,
            drop: Dropout::new(p, dropout_generator)?,
            blocks,
            ln_f: LayerNorm::with_options(c, bias, 1e-5, dtype, device)?,
            saved: None,
            wpe_tail_zeros: None,
        })
    }

    /// The architecture.
    #[must_use]
    pub fn config(&self) -> &GptConfig {
        &self.config
    }

    /// The device the parameters live on.
    #[must_use]
    pub fn device(&self) -> Device {
        self.wpe.value.device()
    }

    /// The names of the parameters AdamW should not decay: biases, layer norm weights
    /// and the embeddings (the token embedding is also the tied output head), as the
    /// issue's and GPT-2's usual recipe has it; only the weight matrices of the linear
    /// layers decay.
    #[must_use]
    pub fn no_decay_names(&self) -> Vec<String> {
        self.named_parameters()
            .into_iter()
            .map(|(name, _)| name)
            .filter(|name| {
                let matrix = name.ends_with(".weight")
                    && (name.contains(".c_attn.")
                        || name.contains(".c_proj.")
                        || name.contains(".c_fc."));
                !matrix
            })
            .collect()
    }

    /// Checks the input tokens `[batch, t]`: i64, and `t` within the position table.
    fn check_input(&self, input: &Tensor) -> Result<(usize, usize)> {
        let (b, t) = match *input.dims() {
            [b, t] if input.dtype() == DType::I64 => (b, t),
            _ => {
                return Err(NnError::invalid(
                    "Gpt::forward",
                    format!(
                        "expected token indices [batch, t] of i64, got {:?} of {}",
                        input.dims(),
                        input.dtype()
                    ),
                ))
            }
        };
        if t == 0 || t > self.config.block_size {
            return Err(NnError::invalid(
                "Gpt::forward",
                format!(
                    "a sequence of {t} tokens does not fit the position table of block_size {}: \
                     expected 1 ..= {} tokens",
                    self.config.block_size, self.config.block_size
                ),
            ));
        }
        Ok((b, t))
    }
}

impl Module for Gpt {
    fn forward(&mut self, input: &Tensor, train: bool) -> Result<Tensor> {
        let (b, t) = self.check_input(input)?;
        let _autocast = self.config.precision.autocast()?;
        let c = self.config.n_embd;
        let tokens = self.wte.forward(input, train)?;
        let positions = self.wpe.value.narrow(0, 0, t)?;
        let mut x = self.drop.forward(&tokens.add(&positions)?, train)?;
        for block in &mut self.blocks {
            x = block.forward(&x, train)?;
        }
        let hidden = self.ln_f.forward(&x, train)?.reshape(&[b * t, c])?;
        let logits = hidden.matmul(&self.wte.weight().value.t()?)?;
        self.saved = train.then_some(SavedHead {
            hidden,
            dims: [b, t, c],
        });
        Ok(logits.reshape(&[b, t, self.config.vocab_size])?)
    }

    /// The token ids into the embedding's staged buffer (a CUDA graph's step input).
    fn stage_graph_input(&mut self, input: &Tensor) -> Result<()> {
        self.check_input(input)?;
        self.wte.stage_graph_input(input)
    }

    /// Accumulates every parameter's gradient; the input gradient is zeros shaped like
    /// the token indices (they are discrete), as [`Embedding`]'s.
    fn backward(&mut self, grad_output: &Tensor) -> Result<Tensor> {
        self.backward_params(grad_output)?;
        let table = &self.wpe.value;
        let (b, t) = (grad_output.dims()[0], grad_output.dims()[1]);
        Ok(Tensor::zeros(&[b, t], table.dtype(), table.device())?)
    }

    fn backward_params(&mut self, grad_output: &Tensor) -> Result<()> {
        let _autocast = self.config.precision.autocast()?;
        let SavedHead {
            hidden,
            dims: [b, t, c],
        } = self
            .saved
            .take()
            .ok_or(NnError::BackwardWithoutForward { layer: "Gpt" })?;
        let vocab = self.config.vocab_size;
        if grad_output.dims() != [b, t, vocab] {
            return Err(NnError::invalid(
                "Gpt::backward",
                format!(
                    "grad_output must have the logits' dims {:?}, got {:?}",
                    [b, t, vocab],
                    grad_output.dims()
                ),
            ));
        }
        let g = grad_output.reshape(&[b * t, vocab])?;
        // The head: logits = hidden wte^T.
        let head_grad = g.t()?.matmul(&hidden)?;
        let g = g.matmul(&self.wte.weight().value)?.reshape(&[b, t, c])?;
        let mut g = self.ln_f.backward(&g)?;
        for block in self.blocks.iter_mut().rev() {
            g = block.backward(&g)?;
        }
        let g = self.drop.backward(&g)?;
        // The position rows 0..t get the sum over the batch; rows past t get zeros.
        let used = g.sum_dim(0, false)?;
        // Positions past the context get zeros; at full context there are none.
        let table = &self.wpe.value;
        let tail = table.dims()[0] - t;
        let wpe_grad = if tail == 0 {
            used
        } else {
            let fits = |z: &&Tensor| {
                z.dims()[0] == tail && z.device() == table.device() && z.dtype() == table.dtype()
            };
            let zeros = match self.wpe_tail_zeros.as_ref().filter(fits) {
                Some(zeros) => zeros.clone(),
                None => {
                    let zeros = Tensor::zeros(&[tail, c], table.dtype(), table.device())?;
                    self.wpe_tail_zeros.insert(zeros).clone()
                }
            };
            Tensor::cat(&[used, zeros], 0)?
        };
        self.wpe.accumulate_grad(wpe_grad)?;
        self.wte.backward_params(&g)?;
        self.wte.weight_mut().accumulate_grad(head_grad)
    }

    fn set_global_rows(&mut self, rows: Option<&GlobalRows>) {
        self.drop.set_global_rows(rows);
        for block in &mut self.blocks {
            block.set_global_rows(rows);
        }
    }

    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        self.wte
            .visit_parameters(&format!("{prefix}transformer.wte."), f);
        visit_leaf(&format!("{prefix}transformer.wpe."), [&self.wpe], f);
        for (i, block) in self.blocks.iter().enumerate() {
            block.visit_parameters(&format!("{prefix}transformer.h.{i}."), f);
        }
        self.ln_f
            .visit_parameters(&format!("{prefix}transformer.ln_f."), f);
    }

    fn visit_parameters_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        self.wte
            .visit_parameters_mut(&format!("{prefix}transformer.wte."), f);
        visit_leaf_mut(&format!("{prefix}transformer.wpe."), [&mut self.wpe], f);
        for (i, block) in self.blocks.iter_mut().enumerate() {
            block.visit_parameters_mut(&format!("{prefix}transformer.h.{i}."), f);
        }
        self.ln_f
            .visit_parameters_mut(&format!("{prefix}transformer.ln_f."), f);
    }
}
