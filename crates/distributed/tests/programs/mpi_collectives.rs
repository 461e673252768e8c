//! The MPI backend's collectives against the serial reference (feature `mpi`).
//!
//! MPI ranks are processes, so this is a plain binary (`harness = false`), not a libtest
//! suite whose tests would run on several threads of each process. `cargo test
//! --features mpi` runs it as a world of one; `tests/scripts/mpi_tests.sh` runs it under
//! `mpirun -np 2` and `-np 4`, where every rank checks its own results.

#[path = "../integration/support/mod.rs"]
mod support;

use distributed::{MpiGroup, ProcessGroup};
use support::collectives::check_all;

fn main() {
    let pg = MpiGroup::init().expect("MPI initialises once per process");
    // A second group in the same process is a typed error, not a second MPI_Init.
    assert!(MpiGroup::init().is_err());
    check_all(&pg);
    if pg.rank() == 0 {
        println!(
            "mpi_collectives: every collective matched the serial reference on {} rank(s)",
            pg.world_size()
        );
    }
}
