//! DDP over MPI (feature `mpi`): under `mpirun -np 2` and `-np 4` (see
//! `tests/scripts/mpi_tests.sh`), invariant mode gives every rank the losses and parameters
//! of a single-process run, bit for bit; fast mode keeps the ranks identical to each
//! other; the data parallel trainer (sharded loader, checkpoint written by rank 0 and
//! read back through the group) continues a run saved mid-way with the single-process
//! curve. A plain binary for the reasons given in `mpi_collectives.rs`.

#[path = "../integration/support/mod.rs"]
mod support;

use std::sync::Arc;

use distributed::{DdpTrainer, MpiGroup, ProcessGroup, ReduceMode, ThreadGroup};
use nn_mini::train::{Run, TrainConfig, TrainingRun};
use support::ddp_model::train;
use tensor_core::{Device, Tensor};

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
    let mut first =
        Tensor::from_vec(fingerprint.clone(), &[fingerprint.len()], Device::Cpu).unwrap();
    group.broadcast(&mut first, 0).unwrap();
    assert_eq!(
        first.to_vec::<u32>().unwrap(),
        fingerprint,
        "fast mode, rank {rank}"
    );

    // The trainer: 20 steps straight on one thread rank, against 9 steps here, a save,
    // a resume through the group, and 11 more.
    let config = TrainConfig {
        seed: 3,
        ..TrainConfig::mlp(vec![8, 16, 4], 128, 32)
    };
    let straight = ThreadGroup::run(1, |pg| {
        let mut t = DdpTrainer::new(config.clone(), invariant, Arc::new(pg))?;
        for _ in 0..20 {
            t.step()?;
        }
        Ok(t.losses().to_vec())
    })
    .unwrap();
    // A folder named after rank 0's process id, which every rank learns through MPI.
    let mut id = Tensor::from_vec(vec![i64::from(std::process::id())], &[1], Device::Cpu).unwrap();
    group.broadcast(&mut id, 0).unwrap();
    let dir =
        std::env::temp_dir().join(format!("ditto-mpi-ddp-{}", id.to_vec::<i64>().unwrap()[0]));
    if rank == 0 {
        std::fs::create_dir_all(&dir).unwrap();
    }
    let path = dir.join("ck.safetensors");
    let mut t = DdpTrainer::new(config, invariant, Arc::clone(&group)).unwrap();
    for _ in 0..9 {
        t.step().unwrap();
    }
    t.save(&path).unwrap();
    drop(t);
    let mut t = DdpTrainer::resume(&path, Arc::clone(&group), None).unwrap();
    while t.step_count() < 20 {
        t.step().unwrap();
    }
    let bits = |l: &[f32]| l.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(t.losses()), bits(&straight[0]), "trainer, rank {rank}");
    group.barrier().unwrap();
    if rank == 0 {
        std::fs::remove_dir_all(&dir).unwrap();
        println!("mpi_ddp: invariant mode and the trainer on {world} rank(s) matched the single-process run bit for bit");
    }
}
