//! What the training binaries (`train_resume`, `ddp_train`, `train_gpt`) share: the one
//! training loop (`run`), the run's flags, the checks of its paths before step 1
//! (`outputs`), periodic checkpoints and restarts (`elastic`), the CSV, the end-of-run
//! report (comparison, plot), the data parallel launch (`ddp`) and the demos' plumbing.
//! Each binary keeps its flags, its model and its first line; a training binary copied
//! from one takes this folder along.

mod allocator;
pub mod curves;
// train_resume runs no ranks.
#[allow(dead_code)]
pub mod ddp;
pub mod demo;
pub mod elastic;
pub mod flags;
pub mod outputs;
pub mod plot;
pub mod report;
pub mod run;
