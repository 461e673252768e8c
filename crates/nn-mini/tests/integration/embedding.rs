//! `Embedding`: rows out, gradients accumulated by `index_add` in index order, the same
//! bits on every thread count; typed errors for bad input. The switch's modes are
//! tested in `determinism_modes.rs` (they are process-wide).

use crate::support;

use nn_mini::{Embedding, Module, NnError};
use tensor_core::{Algorithm, DType, Device, Tensor};

use support::grad_values;
use test_support::on_threads;

fn table(rows: usize, dim: usize) -> Tensor {
    let values: Vec<f32> = (0..rows * dim).map(|i| i as f32 * 0.25 - 3.0).collect();
    Tensor::from_vec(values, &[rows, dim], Device::Cpu).unwrap()
}

fn tokens(values: &[i64], dims: &[usize]) -> Tensor {
    Tensor::from_slice(values, dims, Device::Cpu).unwrap()
}

/// Mixed-magnitude gradients, so a change of summation order shows in the bits.
fn grads(n: usize) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
            let scale = [1e-3f32, 0.7, 31.0, 1e4][(h % 4) as usize];
            ((h >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
        })
        .collect()
}

#[test]
fn forward_picks_rows_and_backward_adds_each_rows_gradients_in_index_order() {
    let (rows, dim) = (5, 3);
    let mut layer = Embedding::from_weight(table(rows, dim))
        .unwrap()
        .with_algorithm(Algorithm::Deterministic);
    let ids = [4i64, 0, 4, 2, 4, 0];
    let out = layer.forward(&tokens(&ids, &[2, 3]), true).unwrap();
    assert_eq!(out.dims(), [2, 3, dim]);
    let weight = table(rows, dim).to_vec::<f32>().unwrap();
    let want: Vec<f32> = ids
        .iter()
        .flat_map(|&r| weight[r as usize * dim..][..dim].to_vec())
        .collect();
    assert_eq!(out.to_vec::<f32>().unwrap(), want);

    let g = grads(ids.len() * dim);
    let grad_out = Tensor::from_vec(g.clone(), &[2, 3, dim], Device::Cpu).unwrap();
    let grad_in = layer.backward(&grad_out).unwrap();
    assert_eq!(grad_in.dims(), [2, 3]);
    assert!(grad_in.to_vec::<f32>().unwrap().iter().all(|&x| x == 0.0));
    // Row r's gradient: its positions' gradients summed in index order from +0.0.
    let mut want = vec![0.0f32; rows * dim];
    for (k, &r) in ids.iter().enumerate() {
        for j in 0..dim {
            want[r as usize * dim + j] += g[k * dim + j];
        }
    }
    let got = grad_values(layer.weight());
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&want));
}

#[test]
fn the_deterministic_backward_is_identical_on_1_and_2_threads_and_every_run() {
    // A small vocabulary and many tokens: the shape where the fast path pays.
    let (rows, dim, n) = (50, 32, 8192);
    let ids: Vec<i64> = (0..n as i64).map(|k| (k * 7919) % rows as i64).collect();
    let grad_out = Tensor::from_vec(grads(n * dim), &[n, dim], Device::Cpu).unwrap();
    let run = |threads: usize| {
        on_threads(threads, || {
            let mut layer = Embedding::from_weight(table(rows, dim))
                .unwrap()
                .with_algorithm(Algorithm::Deterministic);
            layer.forward(&tokens(&ids, &[n]), true).unwrap();
            layer.backward_params(&grad_out).unwrap();
            let grad = grad_values(layer.weight());
            grad.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        })
    };
    let one = run(1);
    for threads in [1, 2, 2, 3] {
        assert!(run(threads) == one, "{threads} threads differ from 1");
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let mut layer = Embedding::from_weight(table(4, 2)).unwrap();
    let invalid = |r: nn_mini::Result<Tensor>| matches!(r, Err(NnError::InvalidArgument { .. }));
    assert!(invalid(layer.forward(&tokens(&[0, 4], &[2]), true)));
    assert!(invalid(layer.forward(&tokens(&[-1], &[1]), true)));
    let floats = Tensor::zeros(&[2], DType::F32, Device::Cpu).unwrap();
    assert!(invalid(layer.forward(&floats, true)));
    assert!(matches!(
        layer.backward(&Tensor::zeros(&[1, 2], DType::F32, Device::Cpu).unwrap()),
        Err(NnError::BackwardWithoutForward { layer: "Embedding" })
    ));
    layer.forward(&tokens(&[1, 2], &[2]), true).unwrap();
    let wrong = Tensor::zeros(&[3, 2], DType::F32, Device::Cpu).unwrap();
    assert!(invalid(layer.backward(&wrong)));
    assert!(Embedding::from_weight(Tensor::zeros(&[4], DType::F32, Device::Cpu).unwrap()).is_err());
    let generator = rng_gen::Generator::new(Device::Cpu);
    assert!(Embedding::new(0, 3, &generator).is_err());
    let layer = Embedding::new(10, 3, &generator).unwrap();
    assert_eq!(layer.weight().value.dims(), [10, 3]);
}
