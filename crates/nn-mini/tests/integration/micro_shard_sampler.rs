//! Loaders sharded by micro-shards (`MicroShardSampler`, the invariant mode's dealing at
//! any world size): ranks holding disjoint shard sets load, together, exactly the single
//! loader's batches (same samples, same per-sample augmentation, the short last batch
//! of an epoch included), each rank's row `j` being global row `rows(batch)[j]`, with
//! or without workers, and a rank resumes mid-epoch from its state. A loader takes one
//! sampler kind, not both.

use std::sync::Arc;

use nn_mini::data::{DataLoader, DistributedSampler, MicroShardSampler};
use nn_mini::train::GaussianClusters;
use rng_gen::Key;

fn loader(len: usize, batch: usize, shards: Option<&[usize]>, workers: usize) -> DataLoader {
    let builder = DataLoader::builder(Arc::new(
        GaussianClusters::new(Key::new(5), len, 3, 4).unwrap(),
    ))
    .batch_size(batch)
    .shuffle(true)
    .num_workers(workers)
    .key(Key::new(77));
    match shards {
        Some(s) => builder.micro_shard_sampler(MicroShardSampler::new(8, s).unwrap()),
        None => builder,
    }
    .build()
    .unwrap()
}

fn bits(t: &tensor_core::Tensor) -> Vec<u32> {
    t.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

#[test]
fn ranks_of_any_count_together_load_the_single_process_batches() {
    // 8 micro-shards on 3 ranks (the leaf-line pieces of docs/contract.md §9.3); 45
    // samples in batches of 16: the last batch of each epoch has 13 rows.
    let pieces: [&[usize]; 3] = [&[0, 4, 2], &[6, 1, 5], &[3, 7]];
    let (len, global) = (45, 16);
    let mut single = loader(len, global, None, 0);
    let mut ranks: Vec<DataLoader> = pieces
        .iter()
        .enumerate()
        .map(|(r, p)| loader(len, global, Some(p), r % 2))
        .collect();
    for rank in &ranks {
        assert_eq!(rank.batches_per_epoch(), single.batches_per_epoch());
    }
    for step in 0..2 * single.batches_per_epoch() {
        let reference = single.next_batch().unwrap();
        let width = 3;
        let inputs = bits(&reference.input);
        assert_eq!(
            single.global_batch_rows(reference.index),
            reference.indices.len()
        );
        let mut seen = 0;
        for (r, rank) in ranks.iter_mut().enumerate() {
            let batch_rows = rank.global_batch_rows(rank.position());
            assert_eq!(batch_rows, reference.indices.len(), "step {step}");
            let batch = rank.next_batch().unwrap();
            let rows = rank.micro_shard_sampler().unwrap().rows(batch_rows);
            assert_eq!(rows.len(), batch.indices.len(), "step {step} rank {r}");
            let got = bits(&batch.input);
            for (j, &g) in rows.iter().enumerate() {
                let g = g as usize;
                assert_eq!(
                    batch.indices[j], reference.indices[g],
                    "step {step} rank {r}"
                );
                assert_eq!(
                    got[j * width..][..width],
                    inputs[g * width..][..width],
                    "augmented input, step {step} rank {r} row {j}"
                );
            }
            seen += rows.len();
        }
        assert_eq!(seen, reference.indices.len(), "the ranks cover the batch");
    }
    // A rank resumes mid-epoch: its state (global batch size, position) continues.
    let mut resumed = loader(len, global, Some(pieces[1]), 0);
    let state = ranks[1].state().unwrap();
    resumed.set_state(&state).unwrap();
    let (a, b) = (
        resumed.next_batch().unwrap(),
        ranks[1].next_batch().unwrap(),
    );
    assert_eq!((a.indices, a.epoch, a.index), (b.indices, b.epoch, b.index));
}

#[test]
fn a_loader_takes_one_sampler_kind() {
    let both = DataLoader::builder(Arc::new(
        GaussianClusters::new(Key::new(5), 16, 3, 4).unwrap(),
    ))
    .batch_size(4)
    .sampler(DistributedSampler::new(2, 0).unwrap())
    .micro_shard_sampler(MicroShardSampler::new(8, &[0]).unwrap())
    .build();
    assert!(both.is_err());
}
