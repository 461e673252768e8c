//! Dropout under `set_global_rows`: each rank's rows get exactly the masks a single
//! process gives those rows of the global batch, ranks' masks differ, and every rank's
//! generator advances as the single process's does (lockstep), over several batches and
//! several forwards per batch (micro-shards).

use nn_mini::{Dropout, GlobalRows, Module};
use rng_gen::{Generator, Key};
use tensor_core::{Device, Tensor};

const KEY: Key = Key {
    seed: 0xD15_7EED,
    offset: 5,
};

fn input(rows: &[u64], row_len: usize, batch: u64) -> Tensor {
    let values = rows
        .iter()
        .flat_map(|&r| {
            (0..row_len).map(move |j| 1.0 + (r as usize * row_len + j) as f32 + batch as f32 * 0.5)
        })
        .collect();
    Tensor::from_vec(values, &[rows.len(), row_len], Device::Cpu).unwrap()
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_bits().unwrap()
}

/// The single process: two batches of 12 rows of 33 features (rows start mid-block).
fn single_process(row_len: usize) -> (Vec<Tensor>, Vec<Tensor>, u64) {
    let g = Generator::from_key(Device::Cpu, KEY);
    let mut layer = Dropout::new(0.4, &g).unwrap();
    let all: Vec<u64> = (0..12).collect();
    let (mut outs, mut grads) = (Vec::new(), Vec::new());
    for batch in 0..2 {
        outs.push(layer.forward(&input(&all, row_len, batch), true).unwrap());
        grads.push(layer.backward(&input(&all, row_len, 7)).unwrap());
    }
    (outs, grads, g.offset())
}

#[test]
fn ranks_get_the_single_process_rows_and_stay_in_lockstep() {
    let row_len = 33;
    let (outs, grads, offset) = single_process(row_len);
    for world in [1u64, 2, 3, 4] {
        let mut masks_by_rank = Vec::new();
        for rank in 0..world {
            let g = Generator::from_key(Device::Cpu, KEY);
            let mut layer = Dropout::new(0.4, &g).unwrap();
            let mine: Vec<u64> = (rank..12).step_by(world as usize).collect();
            let mut rank_outs = Vec::new();
            for batch in 0..2u64 {
                // Two micro-shards per rank and batch: the first reserves, the second reuses.
                for shard in mine.chunks(mine.len().div_ceil(2)) {
                    layer.set_global_rows(Some(
                        &GlobalRows::new(batch, 12, shard.to_vec()).unwrap(),
                    ));
                    let out = layer.forward(&input(shard, row_len, batch), true).unwrap();
                    let grad = layer.backward(&input(shard, row_len, 7)).unwrap();
                    let idx: Vec<usize> = shard.iter().map(|&r| r as usize).collect();
                    let b = batch as usize;
                    assert_eq!(
                        bits(&out),
                        bits(&outs[b].index_select(0, &idx).unwrap()),
                        "world {world} rank {rank}"
                    );
                    assert_eq!(bits(&grad), bits(&grads[b].index_select(0, &idx).unwrap()));
                    rank_outs.push(out);
                }
            }
            assert_eq!(g.offset(), offset, "generators stay in lockstep");
            let zeros: Vec<bool> = rank_outs
                .iter()
                .flat_map(|t| t.to_vec::<f32>().unwrap())
                .map(|v| v == 0.0)
                .collect();
            masks_by_rank.push(zeros);
        }
        for a in 0..masks_by_rank.len() {
            for b in a + 1..masks_by_rank.len() {
                assert_ne!(
                    masks_by_rank[a], masks_by_rank[b],
                    "ranks {a} and {b} drew the same mask"
                );
            }
        }
    }
}

#[test]
fn a_new_width_within_one_batch_is_an_error() {
    let g = Generator::from_key(Device::Cpu, KEY);
    let mut layer = Dropout::new(0.5, &g).unwrap();
    layer.set_global_rows(Some(&GlobalRows::new(0, 4, vec![0, 1]).unwrap()));
    layer.forward(&input(&[0, 1], 8, 0), true).unwrap();
    assert!(layer.forward(&input(&[0, 1], 9, 0), true).is_err());
    assert!(GlobalRows::new(0, 4, vec![4]).is_err());
    // Back to whole batches: the ordinary path.
    layer.set_global_rows(None);
    let before = g.offset();
    layer.forward(&input(&[0, 1, 2], 8, 0), true).unwrap();
    assert_eq!(g.offset(), before + 6);
}
