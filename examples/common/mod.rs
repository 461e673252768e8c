//! What `train_resume` and `ddp_train` share around their training loops: the run's
//! flags, the checks of its paths before step 1 (`outputs`), periodic checkpoints and
//! restarts (`elastic`), progress lines and the CSV, the end-of-run report (comparison,
//! plot) and the demos' plumbing. Each example keeps its own `main` and loop, readable top to bottom;
//! a training binary copied from one takes this folder along.

mod allocator;
pub mod curves;
pub mod demo;
pub mod elastic;
pub mod flags;
pub mod outputs;
pub mod plot;
pub mod report;
pub mod run;
