//! The MLP run of `train_resume` as a [`RunConfig`]: [`TrainConfig`] builds it, its loss
//! is cross-entropy and its update one SGD step.

use tensor_core::Tensor;

use super::fresh_run::build_mlp_run;
use super::run_settings;
use super::{FreshRun, GraphStep, RunConfig, RunState, TrainConfig};
use crate::data::RankShare;
use crate::{cross_entropy, Result, Sequential};

impl RunConfig for TrainConfig {
    type Model = Sequential;

    const MODEL_KIND: &'static str = "mlp";

    run_settings!();

    fn samples_per_epoch(&self) -> usize {
        self.dataset_size
    }

    fn validate(&self) -> Result<()> {
        TrainConfig::validate(self)
    }

    fn parameter_shapes(&self) -> Vec<(String, Vec<usize>)> {
        TrainConfig::parameter_shapes(self)
    }

    fn build(self, shard: Option<RankShare>) -> Result<FreshRun<Self>> {
        build_mlp_run(self, shard)
    }

    fn loss(&self, output: &Tensor, target: &Tensor) -> Result<(Tensor, Tensor)> {
        cross_entropy(output, target)
    }

    /// A step is cross-entropy and one SGD step: a CUDA graph captures all of it.
    fn graph_step(&self) -> Option<GraphStep> {
        Some(GraphStep {
            classes: *self.layers.last()?,
            update_in_graph: true,
        })
    }

    fn apply_update(state: &mut RunState<Self>, model: &mut Sequential) -> Result<()> {
        state.optimizer_mut().step(model)
    }
}
