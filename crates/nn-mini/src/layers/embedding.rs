//! `Embedding`: a lookup table of rows, PyTorch's `nn.Embedding`, whose backward is an
//! `index_add` and so has a nondeterministic fast path.
//!
//! The forward pass picks rows (`index_select`); the backward pass adds each position's
//! output gradient into the row it came from. Tokens repeat within a batch, so several
//! gradients land on one row: that accumulation is where PyTorch's embedding backward
//! is nondeterministic on CUDA, and where ditto's [`Tensor::index_add_with`] offers a
//! fast path (atomics on CUDA, threads in arrival order on the CPU) next to a
//! deterministic one. The layer's [`Algorithm`] picks between them under the
//! deterministic-algorithms switch.

use rng_gen::Generator;
use tensor_core::{Algorithm, CheckedIndex, DType, Tensor};

use crate::{visit_leaf, visit_leaf_mut, GradRowGroups, Module, NnError, Parameter, Result};

/// A table of `num_embeddings` rows of `embedding_dim` values. Input: an i64 tensor of
/// row indices, any shape; output: that shape plus `[embedding_dim]`.
///
/// Initialisation is PyTorch's default, `N(0, 1)` ([`rng_gen::randn`] on the generator
/// given), so the same generator state gives the same table on any device.
#[derive(Debug)]
pub struct Embedding {
    weight: Parameter,
    algorithm: Algorithm,
    /// The flattened indices of the last training forward (checked, on the weight's
    /// device with their sort), and the output's dims.
    saved_index: Option<(CheckedIndex, Vec<usize>)>,
    /// Row groups (of the input's first dimension) whose table gradients backward keeps
    /// apart (see [`GradRowGroups`]).
    row_groups: Option<GradRowGroups>,
    /// Indices staged for CUDA graphs' steps ([`Module::stage_graph_input`]), one per
    /// index count (a graph per batch shape): each stays in its device buffer, which a
    /// captured step reads, and is refilled in place for the next replay.
    staged: Vec<CheckedIndex>,
}

impl Embedding {
    /// An f32 table on `generator`'s device, its backward on [`Algorithm::Auto`].
    pub fn new(num_embeddings: usize, embedding_dim: usize, generator: &Generator) -> Result<Self> {
        if num_embeddings == 0 || embedding_dim == 0 {
            return Err(NnError::invalid(
                "Embedding::new",
                format!(
                    "sizes must be positive, got num_embeddings = {num_embeddings}, \
                     embedding_dim = {embedding_dim}"
                ),
            ));
        }
        let dims = [num_embeddings, embedding_dim];
        let weight = rng_gen::randn(&dims, DType::F32, generator.device(), Some(generator))?;
        Embedding::from_weight(weight)
    }

    /// A table with the given 2-D float weight `[num_embeddings, embedding_dim]`.
    pub fn from_weight(weight: Tensor) -> Result<Self> {
        if weight.rank() != 2 || !weight.dtype().is_float() {
            return Err(NnError::invalid(
                "Embedding::from_weight",
                format!(
                    "weight must be a 2-D float tensor [num_embeddings, embedding_dim], \
                     got {:?} of {}",
                    weight.dims(),
                    weight.dtype()
                ),
            ));
        }
        Ok(Embedding {
            weight: Parameter::new("weight", weight),
            algorithm: Algorithm::Auto,
            saved_index: None,
            row_groups: None,
            staged: Vec::new(),
        })
    }

    /// The same table with its backward's `index_add` on `algorithm`:
    /// `Algorithm::Fast` asks for the arrival-order path (an error under
    /// `DeterministicMode::Error`), `Deterministic` for the fixed order always.
    #[must_use]
    pub fn with_algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// The table `[num_embeddings, embedding_dim]`.
    #[must_use]
    pub fn weight(&self) -> &Parameter {
        &self.weight
    }

    /// The table, mutably: for a model that uses it twice, like a GPT whose output head
    /// is tied to its token embedding and adds the head's gradient into the table's.
    pub fn weight_mut(&mut self) -> &mut Parameter {
        &mut self.weight
    }

    /// The input's indices, checked against the table, as `usize`.
    fn indices(&self, input: &Tensor) -> Result<Vec<usize>> {
        if input.dtype() != DType::I64 {
            return Err(NnError::invalid(
                "Embedding::forward",
                format!(
                    "expected an i64 tensor of row indices, got {}",
                    input.dtype()
                ),
            ));
        }
        let rows = self.weight.value.dims()[0];
        let values = input.to_vec::<i64>()?;
        values
            .iter()
            .map(|&i| match usize::try_from(i) {
                Ok(row) if row < rows => Ok(row),
                _ => Err(NnError::invalid(
                    "Embedding::forward",
                    format!("index {i} is not a row of the table (expected 0 <= index < {rows})"),
                )),
            })
            .collect()
    }
}

impl Module for Embedding {
    /// The rows of the indices. They are checked where they are (free for indices on
    /// the host, as a GPT's token ids are) and placed on the table's device once, with
    /// what the backward's `index_add` needs ([`CheckedIndex`]): a step on a GPU then
    /// uploads them once and waits for nothing.
    /// An index staged for a graph ([`Module::stage_graph_input`]) whose indices are the
    /// input's is used as it is, with no upload: what a capture needs, and the same rows.
    fn forward(&mut self, input: &Tensor, train: bool) -> Result<Tensor> {
        let table = &self.weight.value;
        let indices = self.indices(input)?;
        let index = match self
            .staged
            .iter()
            .find(|s| s.as_slice() == indices.as_slice())
        {
            Some(staged) => staged.clone(),
            None => CheckedIndex::new(indices, table.dims()[0], table.device())?,
        };
        let rows = table.index_select_checked(0, &index)?;
        let mut dims = input.dims().to_vec();
        dims.push(table.dims()[1]);
        let out = rows.reshape(&dims)?;
        self.saved_index = train.then_some((index, dims));
        Ok(out)
    }

    /// Accumulates the table's gradient and returns zeros shaped like the input, in the
    /// table's dtype: indices are discrete, so the loss does not change with them
    /// (PyTorch returns no gradient there at all).
    fn backward(&mut self, grad_output: &Tensor) -> Result<Tensor> {
        let input_dims = match &self.saved_index {
            Some((_, dims)) => dims[..dims.len() - 1].to_vec(),
            None => return Err(NnError::BackwardWithoutForward { layer: "Embedding" }),
        };
        self.backward_params(grad_output)?;
        let table = &self.weight.value;
        Ok(Tensor::zeros(&input_dims, table.dtype(), table.device())?)
    }

    fn backward_params(&mut self, grad_output: &Tensor) -> Result<()> {
        let (index, dims) = self
            .saved_index
            .take()
            .ok_or(NnError::BackwardWithoutForward { layer: "Embedding" })?;
        if grad_output.dims() != dims.as_slice() {
            return Err(NnError::invalid(
                "Embedding::backward",
                format!(
                    "grad_output must have the forward output's dims {dims:?}, got {:?}",
                    grad_output.dims()
                ),
            ));
        }
        let table = &self.weight.value;
        let grad = grad_output.reshape(&[index.len(), table.dims()[1]])?;
        // Rows used several times get several gradients: the accumulation whose order
        // the algorithm (and the switch) decides.
        let table_grad = |index: &CheckedIndex, grad: &Tensor| -> Result<Tensor> {
            let dims = table.dims();
            Ok(Tensor::zeros_index_add_checked(
                dims,
                0,
                index,
                grad,
                1.0,
                self.algorithm,
            )?)
        };
        let Some(groups) = &self.row_groups else {
            let grad_weight = table_grad(&index, &grad)?;
            return self.weight.accumulate_grad(grad_weight);
        };
        // Group g: the positions of its input rows, each input row holding `per_row`
        // indices; the same index_add a backward over those rows alone runs.
        if dims.len() < 2 || dims[0] != groups.rows() {
            return Err(NnError::invalid(
                "Embedding::backward",
                format!(
                    "gradient row groups cover {} input rows, the output is {dims:?}",
                    groups.rows()
                ),
            ));
        }
        let per_row: usize = dims[1..dims.len() - 1].iter().product();
        let mut grads = Vec::with_capacity(groups.len());
        for rows in groups.ranges() {
            let (start, len) = (rows.start * per_row, rows.len() * per_row);
            let part = index.as_slice()[start..start + len].to_vec();
            let index = CheckedIndex::new(part, index.bound(), index.device())?;
            grads.push(table_grad(&index, &grad.narrow(0, start, len)?)?);
        }
        self.weight.accumulate_group_grads(grads)
    }

    /// The input's indices, checked, into the staged buffer of their count (made on first
    /// use, refilled in place after): the next forward of this input reads them there.
    fn stage_graph_input(&mut self, input: &Tensor) -> Result<()> {
        let indices = self.indices(input)?;
        let table = &self.weight.value;
        match self.staged.iter_mut().find(|s| s.len() == indices.len()) {
            Some(staged) => staged.refill(indices)?,
            None => {
                let staged = CheckedIndex::new(indices, table.dims()[0], table.device())?;
                self.staged.push(staged);
            }
        }
        Ok(())
    }

    /// Each position's gradient goes to its own table row: groups of input rows give
    /// the index_adds of their positions alone; the input gradient is zeros.
    fn supports_grad_row_groups(&self) -> bool {
        true
    }

    fn set_grad_row_groups(&mut self, groups: Option<&GradRowGroups>) {
        self.row_groups = groups.cloned();
    }

    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        visit_leaf(prefix, [&self.weight], f);
    }

    fn visit_parameters_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        visit_leaf_mut(prefix, [&mut self.weight], f);
    }
}
