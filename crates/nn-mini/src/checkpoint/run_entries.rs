//! The names a training run's checkpoint stores its own parts under: the step, the loss
//! history, the loader, the dropout generator, the optimiser's prefix and the run's
//! metadata keys (re-exported as `nn_mini::train::STEP` and so on, where the training
//! loops that write them use them).
//!
//! They are part of the file a run writes, not of one loop: a checkpoint resumes only
//! while every version spells them the same, and the checkpoint module reads some of
//! them itself ([`CheckpointDir`](super::CheckpointDir) checks the step a file holds
//! against its file name). So they are defined here, with the file format, and the
//! checkpoint module needs nothing from the training loop.

/// Checkpoint metadata key of the run's [`TrainConfig`](crate::train::TrainConfig) (JSON).
pub const CONFIG_KEY: &str = "train.config";
/// Checkpoint metadata key of the kind of model the run trains
/// ([`RunConfig::MODEL_KIND`](crate::train::RunConfig::MODEL_KIND): `"mlp"`, `"gpt"`).
/// Absent in checkpoints written before it existed, which hold the MLP.
pub const MODEL_KEY: &str = "train.model";
/// Checkpoint name prefix of the optimiser's entries.
pub const OPTIM_PREFIX: &str = "optim.";
/// Checkpoint metadata key of the arithmetic the run used: `"portable"` or `"default"`
/// (`tensor_core::use_portable_arithmetic`, docs/contract.md §14). Absent in checkpoints
/// written before it existed, which resume under either.
pub const ARITHMETIC_KEY: &str = "train.arithmetic";
/// Checkpoint entry of the step count (i64 scalar).
pub const STEP: &str = "train.step";
/// Checkpoint entry of the loss history (f32, one per step).
pub const LOSSES: &str = "train.loss_history";
/// Checkpoint entry of the loader state.
pub const LOADER: &str = "loader.state";
/// Checkpoint name of the dropout generator (stored as `rng.dropout`).
pub const DROPOUT_RNG: &str = "dropout";
