//! The integration tests of this crate, built as one test binary (one link of the
//! workspace instead of one per file); each file of `integration/` is a module.
//! Tests that change process-wide state (default generators, deterministic mode,
//! portable arithmetic, the audit sink, environment variables) re-run themselves in
//! a process of their own through `test_support::own_process!`.

#[path = "integration/checkpoint.rs"]
mod checkpoint;
#[path = "integration/checkpoint_dir.rs"]
mod checkpoint_dir;
#[path = "integration/checkpoint_mutation.rs"]
mod checkpoint_mutation;
#[path = "integration/checkpoint_safety.rs"]
mod checkpoint_safety;
#[path = "integration/checkpoint_sigkill.rs"]
mod checkpoint_sigkill;
#[path = "integration/determinism_modes.rs"]
mod determinism_modes;
#[path = "integration/distributed_sampler.rs"]
mod distributed_sampler;
#[path = "integration/embedding.rs"]
mod embedding;
#[path = "integration/global_rows.rs"]
mod global_rows;
#[path = "integration/gpt_eval.rs"]
mod gpt_eval;
#[path = "integration/gpt_generate.rs"]
mod gpt_generate;
#[path = "integration/gpt_torch_parity.rs"]
mod gpt_torch_parity;
#[path = "integration/gpt_train.rs"]
mod gpt_train;
#[path = "integration/grad_row_groups.rs"]
mod grad_row_groups;
#[path = "integration/gradcheck.rs"]
mod gradcheck;
#[path = "integration/loader.rs"]
mod loader;
#[path = "integration/loader_in_order.rs"]
mod loader_in_order;
#[path = "integration/loader_limits.rs"]
mod loader_limits;
#[path = "integration/micro_shard_sampler.rs"]
mod micro_shard_sampler;
#[path = "integration/old_checkpoints.rs"]
mod old_checkpoints;
#[path = "integration/parameter_overrides.rs"]
mod parameter_overrides;
#[path = "integration/portable_resume.rs"]
mod portable_resume;
#[path = "integration/sgd.rs"]
mod sgd;
#[path = "integration/support/mod.rs"]
mod support;
#[path = "integration/train_resume.rs"]
mod train_resume;
#[path = "integration/train_resume_default_rng.rs"]
mod train_resume_default_rng;
#[path = "integration/wide_mlp_threads.rs"]
mod wide_mlp_threads;
