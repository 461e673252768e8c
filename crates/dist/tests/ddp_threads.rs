//! DDP on the threads backend: invariant mode gives bit-identical losses and
//! parameters on 1, 2, 4 and 8 ranks; fast mode is reproducible at a fixed world size;
//! parameters start from rank 0's; ranks with different models are refused.

use std::sync::Arc;

use dist::{
    DdpConfig, DistError, DistributedDataParallel, LocalRows, ProcessGroup, ReduceMode, ThreadGroup,
};
use nn_mini::{cross_entropy, Dropout, Linear, Module, ReLU, Sequential, Sgd, SgdConfig};
use rng_gen::{Generator, Key};
use tensor_core::{Device, Tensor};

const FEATURES: usize = 8;
const CLASSES: usize = 4;

fn model(init_seed: u64, hidden: usize) -> Sequential {
    let init = Generator::from_key(Device::Cpu, Key::new(init_seed));
    let dropout = Generator::from_key(Device::Cpu, Key::new(99));
    Sequential::new()
        .push(Linear::new(FEATURES, hidden, &init).unwrap())
        .push(ReLU::new())
        .push(Dropout::new(0.2, &dropout).unwrap())
        .push(Linear::new(hidden, CLASSES, &init).unwrap())
}

/// Global batch `step`: 16 rows, except a 5-row batch (some micro-shards empty).
fn global_batch(step: u64) -> (Vec<f32>, Vec<i64>) {
    let rows = if step == 2 { 5 } else { 16 };
    let x = (0..rows * FEATURES)
        .map(|i| ((i as u64 * 2_654_435_761 + step * 97) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let y = (0..rows)
        .map(|i| ((i as u64 + step) % CLASSES as u64) as i64)
        .collect();
    (x, y)
}

/// Rank `rank`'s rows of global batch `step`: rows i % world == rank.
fn local(step: u64, rank: usize, world: usize) -> (Tensor, Tensor, Vec<u64>, u64) {
    let (x, y) = global_batch(step);
    let batch_rows = y.len() as u64;
    let rows: Vec<u64> = (rank as u64..batch_rows).step_by(world).collect();
    let xs = rows
        .iter()
        .flat_map(|&r| x[r as usize * FEATURES..][..FEATURES].to_vec())
        .collect();
    let ys = rows.iter().map(|&r| y[r as usize]).collect();
    (
        Tensor::from_vec(xs, &[rows.len(), FEATURES], Device::Cpu).unwrap(),
        Tensor::from_vec(ys, &[rows.len()], Device::Cpu).unwrap(),
        rows,
        batch_rows,
    )
}

/// Losses (bits) and final parameters (bits) of every rank after 4 steps.
fn train(world: usize, mode: ReduceMode) -> Vec<(Vec<u32>, Vec<u32>)> {
    ThreadGroup::run(world, |pg| {
        let rank = pg.rank();
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        // Ranks initialise differently; DDP must start them all from rank 0's values.
        let mut ddp =
            DistributedDataParallel::new(model(1 + rank as u64, 16), group, DdpConfig::new(mode))?;
        let mut sgd = Sgd::new(SgdConfig::new(0.1).momentum(0.9))?;
        let mut losses = Vec::new();
        for step in 0..4 {
            let (input, target, rows, batch_rows) = local(step, rank, world);
            let local = LocalRows {
                input: &input,
                target: &target,
                rows: &rows,
                batch_rows,
            };
            let loss = ddp.forward_backward(local, cross_entropy)?;
            losses.push(loss.to_vec::<f32>()?[0].to_bits());
            sgd.step(ddp.module_mut())?;
        }
        let params = ddp
            .module()
            .parameters()
            .iter()
            .flat_map(|p| p.value.to_vec::<f32>().unwrap())
            .map(f32::to_bits)
            .collect();
        Ok((losses, params))
    })
    .unwrap()
}

#[test]
fn invariant_mode_is_bit_identical_on_1_2_4_and_8_ranks() {
    let mode = ReduceMode::Invariant { micro_shards: 8 };
    let reference = train(1, mode);
    for world in [2, 4, 8] {
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
    let three = ThreadGroup::run(3, |pg| {
        let group: Arc<dyn ProcessGroup> = Arc::new(pg);
        let config = DdpConfig::new(ReduceMode::Invariant { micro_shards: 8 });
        Ok(DistributedDataParallel::new(model(1, 16), group, config).is_err())
    })
    .unwrap();
    assert_eq!(three, [true; 3], "3 ranks do not divide 8 micro-shards");
}
