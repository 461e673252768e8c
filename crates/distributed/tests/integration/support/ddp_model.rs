//! A small MLP with dropout trained for a few steps under DDP on any process group:
//! the shared body of the threads and MPI DDP tests.

use std::sync::Arc;

use distributed::{DdpConfig, DistributedDataParallel, LocalRows, ProcessGroup, ReduceMode};
use nn_mini::{cross_entropy, Dropout, Linear, Module, ReLU, Sequential, Sgd, SgdConfig};
use rng_gen::{Generator, Key};
use tensor_core::{Device, Tensor};

const FEATURES: usize = 8;
const CLASSES: usize = 4;

pub fn model(init_seed: u64, hidden: usize) -> Sequential {
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

/// Rank `rank`'s rows of global batch `step`: rows i % world == rank in fast mode, the
/// rows of its micro-shards in invariant mode.
fn local(
    step: u64,
    rank: usize,
    world: usize,
    mode: ReduceMode,
) -> (Tensor, Tensor, Vec<u64>, u64) {
    let (x, y) = global_batch(step);
    let batch_rows = y.len() as u64;
    let rows: Vec<u64> = match mode {
        ReduceMode::Fast => (rank as u64..batch_rows).step_by(world).collect(),
        ReduceMode::Invariant { micro_shards } => {
            let shards = distributed::ddp::tree::shards_of_rank(rank, world, micro_shards);
            (0..batch_rows)
                .filter(|&i| shards.contains(&((i % micro_shards as u64) as usize)))
                .collect()
        }
    };
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

/// What a rank saw in [`train_module`]: bits of every step's loss and gradients, and of
/// the final parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    pub losses: Vec<u32>,
    /// Every parameter's gradient after each step's `forward_backward`, concatenated.
    pub grads: Vec<Vec<u32>>,
    pub params: Vec<u32>,
}

fn bits(tensors: Vec<&Tensor>) -> Vec<u32> {
    tensors
        .iter()
        .flat_map(|t| t.to_vec::<f32>().unwrap())
        .map(f32::to_bits)
        .collect()
}

/// This rank's losses (bits) and final parameters (bits) after 4 steps.
pub fn train(
    group: Arc<dyn ProcessGroup>,
    mode: ReduceMode,
) -> distributed::Result<(Vec<u32>, Vec<u32>)> {
    // Ranks initialise differently; DDP must start them all from rank 0's values.
    let module = model(1 + group.rank() as u64, 16);
    let trace = train_module(group, mode, module)?;
    Ok((trace.losses, trace.params))
}

/// [`train`] with the module given (`model`'s layers, maybe wrapped): 4 steps of SGD,
/// one of them on a 5-row batch.
pub fn train_module<M: Module>(
    group: Arc<dyn ProcessGroup>,
    mode: ReduceMode,
    module: M,
) -> distributed::Result<Trace> {
    let (rank, world) = (group.rank(), group.world_size());
    let mut ddp = DistributedDataParallel::new(module, group, DdpConfig::new(mode))?;
    let mut sgd = Sgd::new(SgdConfig::new(0.1).momentum(0.9))?;
    let mut losses = Vec::new();
    let mut grads = Vec::new();
    for step in 0..4 {
        let (input, target, rows, batch_rows) = local(step, rank, world, mode);
        let local = LocalRows {
            input: &input,
            target: &target,
            rows: &rows,
            batch_rows,
        };
        let loss = ddp.forward_backward(local, cross_entropy)?;
        losses.push(loss.to_vec::<f32>()?[0].to_bits());
        let params = ddp.module().parameters();
        grads.push(bits(
            params.iter().map(|p| p.grad.as_ref().unwrap()).collect(),
        ));
        sgd.step(ddp.module_mut())?;
    }
    let params = bits(ddp.module().parameters().iter().map(|p| &p.value).collect());
    Ok(Trace {
        losses,
        grads,
        params,
    })
}
