//! Gradient row groups (`nn_mini::GradRowGroups`): a layer's per-group parameter
//! gradients from one backward are the bits of a backward over each group's rows alone,
//! empty groups give zeros, the input gradient is the ungrouped one, and layers that do
//! not support groups say so (containers answer for all their layers).

use crate::support;

use nn_mini::{Dropout, Embedding, GradRowGroups, Linear, Module, NnError, ReLU, Sequential};
use rng_gen::{Generator, Key};
use support::ParamsOnly;
use tensor_core::{DType, Device, Tensor};

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_bits().unwrap()
}

fn generator(seed: u64) -> Generator {
    Generator::from_key(Device::Cpu, Key::new(seed))
}

fn randn(dims: &[usize], seed: u64) -> Tensor {
    rng_gen::randn(dims, DType::F32, Device::Cpu, Some(&generator(seed))).unwrap()
}

/// Rows `range` of `t`, as a fresh tensor (what a pass over those rows alone gets).
fn rows(t: &Tensor, range: std::ops::Range<usize>) -> Tensor {
    let picks: Vec<usize> = range.collect();
    t.index_select(0, &picks).unwrap()
}

fn linear(bias: bool) -> Linear {
    Linear::with_options(5, 3, bias, DType::F32, &generator(1)).unwrap()
}

#[test]
fn linear_group_gradients_are_the_bits_of_each_groups_own_backward() {
    for bias in [true, false] {
        let x = randn(&[9, 5], 2);
        let g = randn(&[9, 3], 3);
        let groups = GradRowGroups::new(&[3, 0, 4, 2]).unwrap();
        let mut layer = linear(bias);
        layer.set_grad_row_groups(Some(&groups));
        layer.forward(&x, true).unwrap();
        let grad_input = layer.backward(&g).unwrap();
        let mut plain = linear(bias);
        plain.forward(&x, true).unwrap();
        assert_eq!(bits(&grad_input), bits(&plain.backward(&g).unwrap()));
        for p in layer.parameters() {
            assert!(p.grad.is_none(), "grouped backward leaves grad alone");
            assert_eq!(p.group_grads.len(), groups.len());
        }
        for (i, range) in groups.ranges().enumerate() {
            let mut alone = linear(bias);
            let expected: Vec<Vec<u64>> = if range.is_empty() {
                alone
                    .parameters()
                    .iter()
                    .map(|p| vec![0; p.value.elem_count()])
                    .collect()
            } else {
                alone.forward(&rows(&x, range.clone()), true).unwrap();
                alone.backward(&rows(&g, range.clone())).unwrap();
                alone
                    .parameters()
                    .iter()
                    .map(|p| bits(p.grad.as_ref().unwrap()))
                    .collect()
            };
            let got: Vec<Vec<u64>> = layer
                .parameters()
                .iter()
                .map(|p| bits(&p.group_grads[i]))
                .collect();
            assert_eq!(got, expected, "group {i}, bias {bias}");
        }
    }
}

#[test]
fn group_gradients_accumulate_and_refuse_a_changed_grouping() {
    let x = randn(&[4, 5], 4);
    let g = randn(&[4, 3], 5);
    let groups = GradRowGroups::new(&[1, 3]).unwrap();
    let mut layer = linear(true);
    layer.set_grad_row_groups(Some(&groups));
    for _ in 0..2 {
        layer.forward(&x, true).unwrap();
        layer.backward_params(&g).unwrap();
    }
    let once = {
        let mut l = linear(true);
        l.set_grad_row_groups(Some(&groups));
        l.forward(&x, true).unwrap();
        l.backward_params(&g).unwrap();
        l.weight().group_grads[1].mul_scalar(2.0).unwrap()
    };
    assert_eq!(bits(&layer.weight().group_grads[1]), bits(&once));
    // Three groups after two: an error naming the parameter, not a silent mix.
    layer.set_grad_row_groups(Some(&GradRowGroups::new(&[1, 1, 2]).unwrap()));
    layer.forward(&x, true).unwrap();
    match layer.backward_params(&g) {
        Err(NnError::InvalidArgument { message, .. }) => assert!(message.contains("weight")),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    // Rows that the groups do not cover are refused too.
    layer.zero_grad();
    assert!(
        layer.weight().group_grads.is_empty(),
        "zero_grad clears them"
    );
    layer.forward(&x.narrow(0, 0, 3).unwrap(), true).unwrap();
    assert!(layer.backward_params(&g.narrow(0, 0, 3).unwrap()).is_err());
}

#[test]
fn embedding_group_gradients_are_each_groups_own_index_add() {
    let table = randn(&[6, 4], 6);
    let index: Vec<i64> = vec![1, 3, 1, 5, 0, 1, 3, 3, 2, 1];
    let input = Tensor::from_vec(index, &[5, 2], Device::Cpu).unwrap();
    let g = randn(&[5, 2, 4], 7);
    let groups = GradRowGroups::new(&[2, 0, 3]).unwrap();
    let mut layer = Embedding::from_weight(table.clone()).unwrap();
    assert!(layer.supports_grad_row_groups());
    layer.set_grad_row_groups(Some(&groups));
    layer.forward(&input, true).unwrap();
    layer.backward_params(&g).unwrap();
    for (i, range) in groups.ranges().enumerate() {
        let mut alone = Embedding::from_weight(table.clone()).unwrap();
        let expected = if range.is_empty() {
            vec![0; table.elem_count()]
        } else {
            alone.forward(&rows(&input, range.clone()), true).unwrap();
            alone.backward_params(&rows(&g, range.clone())).unwrap();
            bits(alone.weight().grad.as_ref().unwrap())
        };
        assert_eq!(bits(&layer.weight().group_grads[i]), expected, "group {i}");
    }
}

#[test]
fn containers_support_row_groups_only_when_every_layer_does() {
    let dropout = generator(9);
    let aware = Sequential::new()
        .push(linear(true))
        .push(ReLU::new())
        .push(Dropout::new(0.5, &dropout).unwrap());
    assert!(aware.supports_grad_row_groups());
    assert!(Sequential::new().supports_grad_row_groups());
    // A module written without row groups in mind: the trait's default says it cannot.
    assert!(!ParamsOnly(Vec::new()).supports_grad_row_groups());
    let mixed = Sequential::new()
        .push(linear(true))
        .push(ParamsOnly(Vec::new()));
    assert!(!mixed.supports_grad_row_groups());
}
