//! `GraphedStep`: one training step captured as a CUDA graph, replayed for every later
//! step (`Trainer::set_cuda_graph`, the demo's `--cuda-graph`).
//!
//! Why: the demo's model is small, so an eager step on a GPU is bound by host work per
//! op (about fifty launches). A replay is one `cuGraphLaunch`. What changes per step
//! flows through buffers the graph reads in place: the batch (the input and the checked
//! targets, refilled with one upload each), the parameters, gradients and momentum
//! buffers (updated in place by the captured optimizer), and the dropout generator
//! (`rng_gen::graph`: each replay draws the masks eager steps would draw). So replayed
//! steps give the eager curve bit for bit, and a checkpoint between replays resumes
//! either way.
//!
//! Shapes are fixed in a graph, so each batch size gets its own (the full batch, and
//! the shorter last batch of an epoch): they share the model's and optimizer's state,
//! which both update in place.
//!
//! The step is captured only once the optimizer's momentum buffers exist (after one
//! eager step, or restored from a checkpoint): the first step creates them, which a
//! replay could not do again.

use rng_gen::graph::Graph;
use tensor_core::{DType, Device, Tensor};

use crate::{cross_entropy_with, ClassTargets, Module, Optimizer, Result};

/// The captured step and the buffers it reads and writes.
pub(crate) struct GraphedStep {
    graph: Graph,
    input: Tensor,
    targets: ClassTargets,
    /// The step's loss (f32 scalar), rewritten by each replay.
    loss: Tensor,
}

impl GraphedStep {
    /// Captures one step of `model` and `optimizer` on `device` over a batch uploaded
    /// from `input` and `target` (host tensors, targets in `0..classes`);
    /// [`run`](Self::run) then replays it. The capture computes nothing: the first
    /// replay trains on this batch.
    pub(crate) fn capture(
        device: Device,
        model: &mut dyn Module,
        optimizer: &mut Optimizer,
        (input, target): (&Tensor, &Tensor),
        classes: usize,
    ) -> Result<Self> {
        let input = input.to_device(device)?;
        let targets = ClassTargets::new("GraphedStep::capture", target, classes, device)?;
        let (graph, loss) = Graph::capture(device, || -> Result<Tensor> {
            model.zero_grad();
            let logits = model.forward(&input, true)?;
            let (loss, grad) = cross_entropy_with(&logits, &targets)?;
            model.backward_params(&grad)?;
            optimizer.step(model)?;
            Ok(loss.to_dtype(DType::F32)?)
        })?;
        Ok(GraphedStep {
            graph,
            input,
            targets,
            loss,
        })
    }

    /// Replays the step on the batch in the buffers and returns its loss (on the
    /// device; a later replay overwrites it).
    pub(crate) fn run(&self) -> Result<&Tensor> {
        self.graph.replay()?;
        Ok(&self.loss)
    }

    /// The batch size the step was captured for (a graph's shapes are fixed: the
    /// shorter last batch of an epoch gets a graph of its own).
    pub(crate) fn rows(&self) -> usize {
        self.input.dims().first().copied().unwrap_or(0)
    }

    /// Writes the next batch (host tensors) into the step's buffers: two uploads, the
    /// targets checked on the host first.
    pub(crate) fn feed(&self, input: &Tensor, target: &Tensor) -> Result<()> {
        self.targets.refill(target)?;
        Ok(self.input.copy_from_host_shared(input)?)
    }
}
