//! The training loop of `examples/train_resume.rs`, as a library so tests can drive it
//! (and resume it at every step) without spawning processes.
//!
//! # Where every random number of a run comes from
//!
//! ```text
//! run key = Key::new(seed)
//!  ├─ fold_in(INIT_DOMAIN = 0)    generator for Linear initialisation (used once)
//!  ├─ fold_in(DROPOUT_DOMAIN = 1) generator shared by the Dropout layers  [checkpointed]
//!  ├─ fold_in(LOADER_DOMAIN = 2)  data loader key -> epoch orders, sample keys
//!  │                              (see crate::data)                       [position checkpointed]
//!  └─ fold_in(DATA_DOMAIN = 3)    synthetic dataset: centres, per-sample points
//! ```
//!
//! The default generators (CPU, and each CUDA device when training there) are not drawn
//! from by the loop, but they are saved and restored too, so code around the loop that
//! uses them (`rng_gen::rand(.., None)`) also continues exactly.

mod config;
mod fresh_run;
#[cfg(feature = "cuda")]
mod graphed_step;
mod mlp_run;
mod pending_losses;
mod run;
mod run_config;
mod run_state;
mod synthetic;
mod trainer;

pub use config::TrainConfig;
pub use fresh_run::{
    build_mlp, sharded_loader, FreshRun, DATA_DOMAIN, DROPOUT_DOMAIN, INIT_DOMAIN, LOADER_DOMAIN,
};
pub use pending_losses::LOSS_SLOTS;
pub use run::{placed, start, ModelOf, Run, Start, Started};
pub(crate) use run_config::{as_string, run_settings};
pub use run_config::{GraphStep, RunConfig};
pub use run_state::{
    check_arithmetic, check_model_kind, check_model_shapes, config_of, default_generator_devices,
    read_history, RunState, TrainingRun, ARITHMETIC_KEY, CONFIG_KEY, DROPOUT_RNG, LOADER, LOSSES,
    MODEL_KEY, OPTIM_PREFIX, STEP,
};
pub use synthetic::GaussianClusters;
pub use trainer::{TrainLoop, Trainer};
