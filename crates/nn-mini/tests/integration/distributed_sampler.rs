//! Loaders sharded with `DistributedSampler`: `W` ranks with batches of `b` together load
//! exactly what one loader with batches of `W * b` loads (same samples, same per-sample
//! augmentation), rank `r`'s local row `j` being global row `j * W + r`; epochs advance
//! by themselves (no `set_epoch`), and a rank resumes mid-epoch from its state.

use std::sync::Arc;

use nn_mini::data::{DataLoader, DistributedSampler};
use nn_mini::train::GaussianClusters;
use rng_gen::Key;

fn dataset(len: usize) -> Arc<GaussianClusters> {
    Arc::new(GaussianClusters::new(Key::new(5), len, 3, 4).unwrap())
}

fn loader(
    len: usize,
    batch: usize,
    sampler: Option<DistributedSampler>,
    workers: usize,
) -> DataLoader {
    let builder = DataLoader::builder(dataset(len))
        .batch_size(batch)
        .shuffle(true)
        .num_workers(workers)
        .key(Key::new(77));
    match sampler {
        Some(s) => builder.sampler(s),
        None => builder,
    }
    .build()
    .unwrap()
}

fn rows(t: &tensor_core::Tensor) -> Vec<Vec<u32>> {
    let n = t.dims()[0];
    let width = t.elem_count() / n.max(1);
    match t.dtype() {
        tensor_core::DType::F32 => t
            .to_vec::<f32>()
            .unwrap()
            .chunks(width)
            .map(|r| r.iter().map(|v| v.to_bits()).collect())
            .collect(),
        _ => t
            .to_vec::<i64>()
            .unwrap()
            .iter()
            .map(|&v| vec![v as u32])
            .collect(),
    }
}

#[test]
fn ranks_together_load_the_single_process_batches_row_for_row() {
    // 48 samples divide by 1, 2 and 4; 50 make padded last batches for 4 ranks.
    for (len, world) in [(48usize, 2usize), (48, 4), (50, 2)] {
        let global = 8;
        let mut single = loader(len, global, None, 0);
        let mut ranks: Vec<DataLoader> = (0..world)
            .map(|r| {
                loader(
                    len,
                    global / world,
                    Some(DistributedSampler::new(world, r).unwrap()),
                    r % 2,
                )
            })
            .collect();
        assert_eq!(ranks[0].batches_per_epoch(), single.batches_per_epoch());
        for step in 0..2 * single.batches_per_epoch() {
            let reference = single.next_batch().unwrap();
            let (inputs, targets) = (rows(&reference.input), rows(&reference.target));
            for (r, rank) in ranks.iter_mut().enumerate() {
                let batch = rank.next_batch().unwrap();
                assert_eq!(
                    (batch.epoch, batch.index),
                    (reference.epoch, reference.index)
                );
                let sampler = rank.sampler().copied().unwrap();
                for (j, (input, target)) in rows(&batch.input)
                    .iter()
                    .zip(rows(&batch.target))
                    .enumerate()
                {
                    let g = sampler.global_row(j);
                    assert_eq!(
                        batch.indices[j], reference.indices[g],
                        "len {len} world {world} step {step}"
                    );
                    assert_eq!(input, &inputs[g], "augmented input, rank {r} row {j}");
                    assert_eq!(target, targets[g]);
                }
            }
        }
    }
}

#[test]
fn epochs_reshuffle_on_their_own_and_a_rank_resumes_mid_epoch() {
    let sampler = DistributedSampler::new(4, 1).unwrap();
    let mut a = loader(48, 3, Some(sampler), 0);
    let per_epoch = a.batches_per_epoch();
    let first: Vec<usize> = (0..per_epoch)
        .flat_map(|_| a.next_batch().unwrap().indices)
        .collect();
    let second: Vec<usize> = (0..per_epoch)
        .flat_map(|_| a.next_batch().unwrap().indices)
        .collect();
    assert_ne!(
        first, second,
        "epoch 1 is reshuffled without any set_epoch call"
    );
    let state = a.state().unwrap();
    let expected = a.next_batch().unwrap();
    let mut b = loader(48, 3, Some(sampler), 2);
    b.set_state(&state).unwrap();
    assert_eq!(b.next_batch().unwrap().indices, expected.indices);
    // A state from another world size has another batch size: refused, not misread.
    let mut other = loader(48, 6, Some(DistributedSampler::new(2, 1).unwrap()), 0);
    assert!(other.set_state(&state).is_err());
}
