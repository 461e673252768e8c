//! The integration tests of this crate, built as one test binary (one link of the
//! workspace instead of one per file); each file of `integration/` is a module.
//! Tests that change process-wide state (default generators, deterministic mode,
//! portable arithmetic, the audit sink, environment variables) re-run themselves in
//! a process of their own through `test_support::own_process!`.

#[path = "integration/custom_backend.rs"]
mod custom_backend;
#[path = "integration/ddp_resume_latest.rs"]
mod ddp_resume_latest;
#[path = "integration/ddp_save_sigkill.rs"]
mod ddp_save_sigkill;
#[path = "integration/ddp_single_pass.rs"]
mod ddp_single_pass;
#[path = "integration/ddp_threads.rs"]
mod ddp_threads;
#[path = "integration/ddp_trainer.rs"]
mod ddp_trainer;
#[path = "integration/gpt_ddp.rs"]
mod gpt_ddp;
#[path = "integration/nccl_availability.rs"]
mod nccl_availability;
#[path = "integration/nccl_standin.rs"]
mod nccl_standin;
#[cfg(feature = "launch")]
#[path = "integration/progress_board.rs"]
mod progress_board;
#[cfg(feature = "launch")]
#[path = "integration/rendezvous.rs"]
mod rendezvous;
#[cfg(feature = "launch")]
#[path = "integration/rendezvous_strangers.rs"]
mod rendezvous_strangers;
#[cfg(feature = "cuda")]
#[path = "integration/standin_visible_devices.rs"]
mod standin_visible_devices;
#[path = "integration/support/mod.rs"]
mod support;
#[cfg(feature = "launch")]
#[path = "integration/tcpstore_conformance.rs"]
mod tcpstore_conformance;
#[cfg(feature = "launch")]
#[path = "integration/tcpstore_torch.rs"]
mod tcpstore_torch;
#[path = "integration/threads_collectives.rs"]
mod threads_collectives;
