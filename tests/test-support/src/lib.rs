//! # test-support: harnesses that tests of several ditto crates share
//!
//! A dev-dependency only; nothing here is part of ditto's API. It exists so that a
//! harness two crates' tests need is written once instead of copied into each.

#![warn(missing_docs)]

mod child;
mod own_process;
mod save_loop;
mod threads;
mod values;

pub use child::wait_with_limit;
pub use own_process::{exact_name, run_in_own_process, TestOutcome, OWN_PROCESS_ENV};
pub use save_loop::{temp_files, SaveLoopChild, SAVED};
pub use threads::on_threads;
pub use values::spread_f32;
