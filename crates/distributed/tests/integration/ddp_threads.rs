//! DDP on the threads backend: invariant mode gives bit-identical losses and
//! parameters on every world size from 1 to 8 ranks (8 micro-shards), 9 being a typed
//! error; fast mode is reproducible at a fixed world size;
//! parameters start from rank 0's; ranks with different models are refused.

use crate::support;

use std::sync::Arc;

use distributed::{
    DdpConfig, DistError, DistributedDataParallel, ProcessGroup, ReduceMode, ThreadGroup,
};
use support::ddp_model::{self, model};

/// Losses (bits) and final parameters (bits) of every rank after 4 steps.
fn train(world: usize, mode: ReduceMode) -> Vec<(Vec<u32>, Vec<u32>)> {
    ThreadGroup::run(world, |pg| ddp_model::train(Arc::new(pg), mode)).unwrap()
}

#[test]
fn invariant_mode_is_bit_identical_on_every_world_size_up_to_the_micro_shards() {
    let mode = ReduceMode::Invariant { micro_shards: 8 };
    let reference = train(1, mode);
    for world in 2..=8 {
        for (rank, result) in train(world, mode).iter().enumerate() {
            assert_eq!(
                result.0, reference[0].0,
                "losses, world {world} rank {rank}"
            );
            assert_eq!(
                result.1, reference[0].1,
                "parameters, world {world} rank {rank}"
            );
        }
    }
}

#[test]
fn fast_mode_is_reproducible_at_a_fixed_world_size() {
    let a = train(2, ReduceMode::Fast);
    let b = train(2, ReduceMode::Fast);
    assert_eq!(a, b);
    assert_eq!(a[0], a[1], "ranks hold the same model");
    // The same mathematics as invariant mode, summed in another order.
    let inv = train(2, ReduceMode::Invariant { micro_shards: 8 });
    for (x, y) in a[0].0.iter().zip(&inv[0].0) {
        assert!((f32::from_bits(*x) - f32::from_bits(*y)).abs() < 1e-4);
    }
}

#[test]
fn ranks_with_different_models_are_refused() {
    let errors = ThreadGroup::run(2, |pg| {
        let rank = pg.rank();
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        let config = DdpConfig::new(ReduceMode::Fast);
        Ok(DistributedDataParallel::new(model(1, 16 + rank), group, config).unwrap_err())
    })
    .unwrap();
    for e in errors {
        match e {
            DistError::Mismatch { message, .. } => assert!(message.contains("[1]"), "{message}"),
            other => panic!("expected Mismatch, got {other}"),
        }
    }
    let nine = ThreadGroup::run(9, |pg| {
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        let config = DdpConfig::new(ReduceMode::Invariant { micro_shards: 8 });
        Ok(DistributedDataParallel::new(model(1, 16), group, config).unwrap_err())
    })
    .unwrap();
    for e in nine {
        assert!(
            matches!(
                e,
                DistError::TooManyRanks {
                    world_size: 9,
                    micro_shards: 8
                }
            ),
            "expected TooManyRanks, got {e}"
        );
        let text = e.to_string();
        assert!(
            text.contains("world size of 9") && text.contains("8 micro-shards"),
            "{text}"
        );
    }
}
