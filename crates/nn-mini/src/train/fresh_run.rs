//! What a training run builds from its configuration before its first step: the model,
//! the optimiser, the loader and the dropout generator, each from its own stream of the
//! run key (the tree in the [module docs](super)), the last three in a [`RunState`] at
//! step 0.
//!
//! The single-process [`Trainer`](super::Trainer) and `distributed`'s data parallel
//! trainer build their runs here, both of them, because a data parallel run must be
//! the single-process run spread over ranks: the same initial weights, dropout stream,
//! dataset and epoch orders. Written once, the two cannot drift apart; only the
//! loader's share of each batch differs, given by a [`RankShare`].

use std::sync::Arc;

use rng_gen::{fold_in, Generator, Key};

use super::{GaussianClusters, RunConfig, RunState, TrainConfig};
use crate::data::RankShare;
use crate::{DataLoader, Dropout, Linear, ReLU, Result, Sequential, Sgd, SgdConfig};

/// Sub-key of the run key for the weight initialisation generator.
pub const INIT_DOMAIN: u64 = 0;
/// Sub-key of the run key for the dropout generator.
pub const DROPOUT_DOMAIN: u64 = 1;
/// Sub-key of the run key for the data loader.
pub const LOADER_DOMAIN: u64 = 2;
/// Sub-key of the run key for the synthetic dataset.
pub const DATA_DOMAIN: u64 = 3;

/// A run at step 0, built from its configuration alone.
pub struct FreshRun<C: RunConfig = TrainConfig> {
    /// The model, initialised from the `INIT_DOMAIN` stream.
    pub model: C::Model,
    /// The rest of the run: the configuration, the optimiser, the loader (shuffled or
    /// sampled from the `LOADER_DOMAIN` key) and the generator the dropout layers draw
    /// from (`DROPOUT_DOMAIN`).
    pub state: RunState<C>,
}

impl<C: RunConfig> FreshRun<C> {
    /// Builds the run `config` describes (after [`RunConfig::validate`]). Draws only
    /// from generators derived from the configuration's seed, never from the
    /// process-wide default generators, so two runs in one process do not disturb each
    /// other. With `shard`, the loader loads one rank's share of every batch of
    /// `batch_size` rows; without it, the whole batch.
    pub fn new(config: C, shard: Option<RankShare>) -> Result<FreshRun<C>> {
        config.validate()?;
        config.build(shard)
    }
}

/// The MLP run of `train_resume` ([`TrainConfig`]): [`build_mlp`]'s model, SGD with the
/// configuration's learning rate, momentum and weight decay, and the loader of the
/// synthetic dataset (`DATA_DOMAIN`), shuffled from the `LOADER_DOMAIN` key.
pub(super) fn build_mlp_run(config: TrainConfig, shard: Option<RankShare>) -> Result<FreshRun> {
    let run = Key::new(config.seed);
    let device = config.device;
    let init = Generator::from_key(device, fold_in(run, INIT_DOMAIN));
    let dropout_generator = Generator::from_key(device, fold_in(run, DROPOUT_DOMAIN));
    let model = build_mlp(&config.layers, config.dropout, &init, &dropout_generator)?;
    let optimizer = Sgd::new(
        SgdConfig::new(config.lr)
            .momentum(config.momentum)
            .weight_decay(config.weight_decay),
    )?;
    let classes = *config
        .layers
        .last()
        .expect("validated: at least two widths");
    let dataset = GaussianClusters::new(
        fold_in(run, DATA_DOMAIN),
        config.dataset_size,
        config.layers[0],
        classes,
    )?;
    let loader = sharded_loader(Arc::new(dataset), &config, shard, true, run)?;
    Ok(FreshRun {
        model,
        state: RunState::fresh(config, optimizer.into(), loader, dropout_generator),
    })
}

/// The loader of a run over `dataset`: batches of the configuration's batch size (this
/// rank's share of them with `shard`), shuffled or not, keyed by `fold_in(run,
/// LOADER_DOMAIN)`.
pub fn sharded_loader<C: RunConfig>(
    dataset: Arc<dyn crate::Dataset>,
    config: &C,
    shard: Option<RankShare>,
    shuffle: bool,
    run: Key,
) -> Result<DataLoader> {
    let batch_size = shard
        .as_ref()
        .map_or(config.batch_size(), |s| s.batch_size(config.batch_size()));
    let mut loader = DataLoader::builder(dataset)
        .batch_size(batch_size)
        .shuffle(shuffle)
        .num_workers(config.num_workers())
        .key(fold_in(run, LOADER_DOMAIN));
    if let Some(share) = shard {
        loader = share.apply(loader);
    }
    loader.build()
}

/// `Linear, ReLU, Dropout` for each hidden width, then a final `Linear`: the layout of
/// PyTorch's `nn.Sequential` with the same layers, so parameter names match. Weights
/// come from `init`, dropout masks from `dropout_generator` (shared by the layers).
pub fn build_mlp(
    widths: &[usize],
    dropout: f64,
    init: &Generator,
    dropout_generator: &Generator,
) -> Result<Sequential> {
    let mut model = Sequential::new();
    for (i, pair) in widths.windows(2).enumerate() {
        model.push_boxed(Box::new(Linear::new(pair[0], pair[1], init)?));
        if i + 2 < widths.len() {
            model.push_boxed(Box::new(ReLU::new()));
            model.push_boxed(Box::new(Dropout::new(dropout, dropout_generator)?));
        }
    }
    Ok(model)
}
