//! The integration tests of this crate, built as one test binary (one link of the
//! workspace instead of one per file); each file of `integration/` is a module.
//! Tests that change process-wide state (default generators, deterministic mode,
//! portable arithmetic, the audit sink, environment variables) re-run themselves in
//! a process of their own through `test_support::own_process!`.

#[path = "integration/audit_runs.rs"]
mod audit_runs;
#[path = "integration/contract_links.rs"]
mod contract_links;
#[path = "integration/cuda_accumulate_parity.rs"]
mod cuda_accumulate_parity;
#[cfg(feature = "cuda")]
#[path = "integration/cuda_driver_checks.rs"]
mod cuda_driver_checks;
#[path = "integration/cuda_driver_version.rs"]
mod cuda_driver_version;
#[cfg(feature = "cuda")]
#[path = "integration/cuda_gemm_checks.rs"]
mod cuda_gemm_checks;
#[cfg(feature = "cuda")]
#[path = "integration/cuda_standin_deferred.rs"]
mod cuda_standin_deferred;
#[cfg(feature = "cuda")]
#[path = "integration/cuda_standin_faults.rs"]
mod cuda_standin_faults;
#[cfg(feature = "cuda")]
#[path = "integration/cuda_standin_freshness.rs"]
mod cuda_standin_freshness;
#[path = "integration/cuda_tensor_ops_parity.rs"]
mod cuda_tensor_ops_parity;
#[path = "integration/ddp_world_sizes.rs"]
mod ddp_world_sizes;
#[path = "integration/determinism_docs.rs"]
mod determinism_docs;
#[path = "integration/elastic_restarts.rs"]
mod elastic_restarts;
#[cfg(feature = "cuda")]
#[path = "integration/generate_command.rs"]
mod generate_command;
#[cfg(feature = "cuda")]
#[path = "integration/gpu_attention.rs"]
mod gpu_attention;
#[path = "integration/gpu_custom_op.rs"]
mod gpu_custom_op;
#[cfg(feature = "cuda")]
#[path = "integration/gpu_determinism.rs"]
mod gpu_determinism;
#[cfg(feature = "cuda")]
#[path = "integration/gpu_gpt.rs"]
mod gpu_gpt;
#[path = "integration/gpu_graph_memory.rs"]
mod gpu_graph_memory;
#[path = "integration/gpu_graph_rng.rs"]
mod gpu_graph_rng;
#[path = "integration/gpu_graphs.rs"]
mod gpu_graphs;
#[cfg(feature = "cuda")]
#[path = "integration/gpu_multi_device.rs"]
mod gpu_multi_device;
#[cfg(feature = "cuda")]
#[path = "integration/gpu_portable.rs"]
mod gpu_portable;
#[cfg(feature = "cuda")]
#[path = "integration/gpu_portable_train.rs"]
mod gpu_portable_train;
#[cfg(feature = "cuda")]
#[path = "integration/gpu_random.rs"]
mod gpu_random;
#[cfg(feature = "cuda")]
#[path = "integration/gpu_step_budget.rs"]
mod gpu_step_budget;
#[cfg(feature = "cuda")]
#[path = "integration/gpu_tensor_ops.rs"]
mod gpu_tensor_ops;
#[cfg(feature = "cuda")]
#[path = "integration/gpu_train_resume.rs"]
mod gpu_train_resume;
#[cfg(feature = "cuda")]
#[path = "integration/gpu_transformer_ops.rs"]
mod gpu_transformer_ops;
#[path = "integration/portable_math_exhaustive.rs"]
mod portable_math_exhaustive;
#[path = "integration/support/mod.rs"]
mod support;
#[path = "integration/thread_counts.rs"]
mod thread_counts;
#[path = "integration/tour.rs"]
mod tour;
#[path = "integration/train_gpt_eval.rs"]
mod train_gpt_eval;
