//! DDP over MPI (feature `mpi`): under `mpirun -np 2` and `-np 4` (see
//! `scripts/mpi_tests.sh`), invariant mode gives every rank the losses and parameters
//! of a single-process run, bit for bit; fast mode keeps the ranks identical to each
//! other. A plain binary for the reasons given in `mpi_collectives.rs`.

mod support;

use std::sync::Arc;

use dist::{MpiGroup, ProcessGroup, ReduceMode, ThreadGroup};
use support::ddp_model::train;

fn main() {
    let group: Arc<dyn ProcessGroup> = Arc::new(MpiGroup::init().expect("MPI initialises"));
    let (rank, world) = (group.rank(), group.world_size());
    let invariant = ReduceMode::Invariant { micro_shards: 8 };
    // The single-process reference, computed by each rank on its own.
    let reference = ThreadGroup::run(1, |pg| train(Arc::new(pg), invariant)).unwrap();
    let mine = train(Arc::clone(&group), invariant).unwrap();
    assert_eq!(
        mine, reference[0],
        "invariant mode on {world} MPI ranks, rank {rank}"
    );

    // Fast mode: every rank must hold rank 0's result.
    let (losses, params) = train(Arc::clone(&group), ReduceMode::Fast).unwrap();
    let fingerprint: Vec<u32> = losses.iter().chain(&params).copied().collect();
    let mut first = tensor_core::Tensor::from_vec(
        fingerprint.clone(),
        &[fingerprint.len()],
        tensor_core::Device::Cpu,
    )
    .unwrap();
    group.broadcast(&mut first, 0).unwrap();
    assert_eq!(
        first.to_vec::<u32>().unwrap(),
        fingerprint,
        "fast mode, rank {rank}"
    );
    if rank == 0 {
        println!(
            "mpi_ddp: invariant mode on {world} rank(s) matched the single-process run bit for bit"
        );
    }
}
