//! `GraphedStep`: one training step captured as a CUDA graph, replayed for every later
//! step (`Trainer::set_cuda_graph`, the binaries' `--cuda-graph`).
//!
//! Why: on a GPU an eager step of a small model is bound by host work per op (the demo
//! MLP's fifty launches, a small GPT's two hundred). A replay is one `cuGraphLaunch`.
//! What changes per step flows through buffers the graph reads in place: the batch (a
//! device input refilled with one upload, or, for a model that reads more than the
//! tensor, what [`Module::stage_graph_input`] stages: a GPT's checked token ids; and the
//! checked targets), the parameters and gradients (written in place by the captured
//! kernels), and the dropout generator (`rng_gen::graph`: each replay draws the masks
//! eager steps would draw, the fused attention's included). So replayed steps give the
//! eager curve bit for bit, and a checkpoint between replays resumes either way.
//!
//! The update's first part, a function of the gradients alone (a GPT's clipping,
//! `RunConfig::prepare_update`), is captured; its optimiser step is captured when it is
//! the same at every step (the MLP's SGD) and otherwise runs eagerly after each replay
//! ([`GraphStep::update_in_graph`]): a GPT's rate follows the schedule of the host's
//! step count, which a captured launch would freeze.
//!
//! Shapes are fixed in a graph, so each batch size gets its own (the full batch, and
//! the shorter last batch of an epoch): they share the model's and optimizer's state,
//! which both update in place.
//!
//! The step is captured only once the optimizer's state exists (after one eager step,
//! or restored from a checkpoint): the first step creates it, which a replay could not
//! do again, and a captured forward would otherwise allocate the gradients' buffers
//! anew each time.

use rng_gen::graph::Graph;
use tensor_core::{DType, Device, Tensor};

use super::GraphStep;
use crate::{cross_entropy_with, ClassTargets, Module, Result};

/// The captured step and the buffers it reads and writes.
pub(crate) struct GraphedStep {
    graph: Graph,
    /// The input the capture saw: a device buffer refilled before each replay, or (a
    /// staged input) the host tensor whose staged form the model keeps.
    input: Tensor,
    staged: bool,
    targets: ClassTargets,
    /// The step's loss (f32 scalar), rewritten by each replay.
    loss: Tensor,
    /// The gradients' norm when the captured update clips, rewritten by each replay.
    norm: Option<Tensor>,
    /// Each parameter's gradient as the capture left it: the buffers a replay rewrites.
    grads: Vec<Option<Tensor>>,
}

impl GraphedStep {
    /// Captures one step of `model` on `device` over `input` and `target` (host
    /// tensors; targets are class indices in `0..step.classes`), ending with `update`
    /// (what of the update the graph holds; it returns the clipped norm, if any). The
    /// input goes to the device unless it is `staged` (the model stages it:
    /// [`Module::stage_graph_input`]). The capture computes nothing: the first
    /// [`run`](Self::run) trains on this batch.
    pub(crate) fn capture<M: Module>(
        device: Device,
        model: &mut M,
        (input, target): (&Tensor, &Tensor),
        (step, staged): (GraphStep, bool),
        mut update: impl FnMut(&mut M) -> Result<Option<Tensor>>,
    ) -> Result<Self> {
        let input = if staged {
            model.stage_graph_input(input)?;
            input.clone()
        } else {
            input.to_device(device)?
        };
        let flat = target.reshape(&[target.elem_count()])?;
        let targets = ClassTargets::new("GraphedStep::capture", &flat, step.classes, device)?;
        let (graph, (loss, norm)) =
            Graph::capture(device, || -> Result<(Tensor, Option<Tensor>)> {
                model.zero_grad();
                let output = model.forward(&input, true)?;
                // Cross-entropy over the last dimension, as the run's eager loss computes it
                // (the MLP's `cross_entropy`, the GPT's `token_cross_entropy`).
                let dims = output.dims().to_vec();
                let rows = output.elem_count() / step.classes.max(1);
                let (loss, grad) =
                    cross_entropy_with(&output.reshape(&[rows, step.classes])?, &targets)?;
                model.backward_params(&grad.reshape(&dims)?)?;
                let norm = update(model)?;
                Ok((loss.to_dtype(DType::F32)?, norm))
            })?;
        let grads = model.parameters().iter().map(|p| p.grad.clone()).collect();
        Ok(GraphedStep {
            graph,
            input,
            staged,
            targets,
            loss,
            norm,
            grads,
        })
    }

    /// Replays the step on the batch in the buffers and returns its loss and clipped
    /// norm (on the device; a later replay overwrites them). Every parameter of `model`
    /// then holds the gradient the replay wrote, whatever an eager step since put there.
    pub(crate) fn run(&self, model: &mut dyn Module) -> Result<(&Tensor, Option<&Tensor>)> {
        self.graph.replay()?;
        for (param, grad) in model.parameters_mut().into_iter().zip(&self.grads) {
            param.grad.clone_from(grad);
        }
        Ok((&self.loss, self.norm.as_ref()))
    }

    /// The batch size the step was captured for (a graph's shapes are fixed: the
    /// shorter last batch of an epoch gets a graph of its own).
    pub(crate) fn rows(&self) -> usize {
        self.input.dims().first().copied().unwrap_or(0)
    }

    /// Writes the next batch (host tensors) into the step's buffers: the targets
    /// checked on the host and uploaded, and the input uploaded or staged by `model`.
    pub(crate) fn feed(
        &self,
        model: &mut dyn Module,
        input: &Tensor,
        target: &Tensor,
    ) -> Result<()> {
        self.targets
            .refill(&target.reshape(&[target.elem_count()])?)?;
        if self.staged {
            return model.stage_graph_input(input);
        }
        Ok(self.input.copy_from_host_shared(input)?)
    }
}
