//! A backend written outside the crate, with public items only: a one-rank `Engine`
//! (what a downstream crate would write for another transport, reduced to the world size
//! where moving data is copying it). It becomes a `ProcessGroup` through the blanket
//! impl, so the shared argument checks run before it is called, and `DdpTrainer` trains
//! on it exactly as on the threads backend.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use distributed::engine::{AllGather, AllToAll, Broadcast, Engine, GroupInfo, Sum};
use distributed::{Backend, DdpTrainer, DistError, ProcessGroup, ReduceMode, ThreadGroup};
use nn_mini::train::{Run, TrainConfig, TrainingRun};
use tensor_core::{DType, Device, Tensor};

/// One rank: every collective's result is this rank's own data. Counts the calls that
/// reach it, so a test can see that a bad argument never does.
#[derive(Default)]
struct Solo {
    calls: AtomicUsize,
}

impl Solo {
    fn called(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
}

impl Engine for Solo {
    fn info(&self) -> GroupInfo {
        GroupInfo {
            rank: 0,
            world_size: 1,
            backend: Backend::Custom("solo"),
            device: Device::Cpu,
        }
    }

    fn run_sum(&self, _args: Sum<'_>) -> distributed::Result<()> {
        // The sum over one rank is its own tensor.
        self.called();
        Ok(())
    }

    fn run_broadcast(&self, _args: Broadcast<'_>) -> distributed::Result<()> {
        self.called();
        Ok(())
    }

    fn run_all_gather(&self, args: AllGather<'_>) -> distributed::Result<()> {
        self.called();
        *args.output = args.input.reshape(args.output.dims())?;
        Ok(())
    }

    fn run_all_to_all(&self, args: AllToAll<'_>) -> distributed::Result<()> {
        self.called();
        *args.output = args.input.reshape(args.output.dims())?;
        Ok(())
    }

    fn run_barrier(&self) -> distributed::Result<()> {
        self.called();
        Ok(())
    }
}

fn f32s(values: &[f32]) -> Tensor {
    Tensor::from_vec(values.to_vec(), &[values.len()], Device::Cpu).unwrap()
}

#[test]
fn a_custom_engine_is_a_process_group_named_by_its_backend() {
    let group: Arc<dyn ProcessGroup> = Arc::new(Solo::default());
    assert_eq!((group.rank(), group.world_size()), (0, 1));
    assert_eq!(group.backend().to_string(), "solo");
    let mut t = f32s(&[1.0, 2.0]);
    group
        .all_reduce(&mut t, distributed::ReduceOp::Sum)
        .unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), [1.0, 2.0]);
    let mut out = Tensor::zeros(&[3], DType::F32, Device::Cpu).unwrap();
    group
        .all_gather(&mut out, &f32s(&[4.0, 5.0, 6.0]), &[3])
        .unwrap();
    assert_eq!(out.to_vec::<f32>().unwrap(), [4.0, 5.0, 6.0]);
}

#[test]
fn bad_arguments_are_refused_before_the_engine_is_called() {
    let solo = Solo::default();
    let mut t = f32s(&[1.0]);
    let mut ints = Tensor::from_vec(vec![1u8], &[1], Device::Cpu).unwrap();
    let mut out = Tensor::zeros(&[2], DType::F32, Device::Cpu).unwrap();
    let refused = [
        solo.broadcast(&mut t, 1),
        solo.all_reduce(&mut ints, distributed::ReduceOp::Sum),
        solo.all_gather(&mut out, &f32s(&[1.0]), &[1]),
        solo.all_to_all(&mut out, &f32s(&[1.0, 2.0]), &[2], &[1, 1]),
    ];
    for (k, result) in refused.into_iter().enumerate() {
        assert!(
            matches!(result, Err(DistError::InvalidArgument { .. })),
            "call {k}: {result:?}"
        );
    }
    assert_eq!(solo.calls.load(Ordering::Relaxed), 0);
}

#[test]
fn ddp_trains_on_a_custom_engine_as_on_one_thread_rank() {
    let config = TrainConfig {
        seed: 5,
        ..TrainConfig::mlp(vec![8, 16, 4], 64, 16)
    };
    let mode = ReduceMode::Invariant { micro_shards: 4 };
    let losses = |group: Arc<dyn ProcessGroup>| -> distributed::Result<Vec<u32>> {
        let mut trainer = DdpTrainer::new(config.clone(), mode, group)?;
        for _ in 0..6 {
            trainer.step()?;
        }
        Ok(trainer.losses().iter().map(|l| l.to_bits()).collect())
    };
    let custom = losses(Arc::new(Solo::default())).unwrap();
    let threads = ThreadGroup::run(1, |pg| losses(Arc::new(pg))).unwrap();
    assert_eq!(custom.len(), 6);
    assert_eq!(custom, threads[0]);
}
