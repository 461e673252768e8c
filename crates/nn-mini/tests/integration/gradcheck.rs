//! Every backward pass against central finite differences, in f64.
//!
//! The scalar checked is `L = sum(forward(x) * r)` for a fixed random `r`, so the
//! gradient fed to `backward` is `r`. Each input element and each parameter element is
//! nudged by `±h` and `(L(+h) - L(-h)) / 2h` is compared with the analytic gradient.
//! Random layers (dropout) have their generator put back at the same key before every
//! forward, so all evaluations see the same mask.

use nn_mini::{cross_entropy, mse_loss, Dropout, Linear, Module, NnError, ReLU, Sequential};
use rng_gen::{Generator, Key};
use tensor_core::{DType, Device, Tensor};

const H: f64 = 1e-6;
const TOL: f64 = 1e-7;

fn uniform(dims: &[usize], low: f64, high: f64, seed: u64) -> Tensor {
    let g = Generator::from_key(Device::Cpu, Key::new(seed));
    rng_gen::uniform(dims, low, high, DType::F64, Device::Cpu, Some(&g)).unwrap()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

fn with_element(t: &Tensor, i: usize, delta: f64) -> Tensor {
    let mut v = values(t);
    v[i] += delta;
    Tensor::from_vec(v, t.dims(), Device::Cpu).unwrap()
}

fn assert_close(analytic: f64, numeric: f64, what: &str) {
    let scale = analytic.abs().max(numeric.abs()).max(1.0);
    assert!(
        (analytic - numeric).abs() <= TOL * scale,
        "{what}: analytic {analytic} vs numeric {numeric}"
    );
}

/// `L = sum(module(x) * r)`, with `reset` run before the forward.
fn objective(module: &mut dyn Module, x: &Tensor, r: &Tensor, reset: &dyn Fn()) -> f64 {
    reset();
    let y = module.forward(x, true).unwrap();
    y.mul(r)
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f64>()
        .unwrap()
}

/// Checks the input gradient and every parameter gradient of `module` at `x`.
fn check_module(module: &mut dyn Module, x: &Tensor, reset: &dyn Fn()) {
    reset();
    let y = module.forward(x, true).unwrap();
    let r = uniform(y.dims(), -1.0, 1.0, 99);
    module.zero_grad();
    let grad_x = values(&module.backward(&r).unwrap());
    for (i, &analytic) in grad_x.iter().enumerate() {
        let plus = objective(module, &with_element(x, i, H), &r, reset);
        let minus = objective(module, &with_element(x, i, -H), &r, reset);
        assert_close(analytic, (plus - minus) / (2.0 * H), &format!("d/dx[{i}]"));
    }
    let grads: Vec<(String, Vec<f64>)> = module
        .named_parameters()
        .into_iter()
        .map(|(n, p)| (n, values(p.grad.as_ref().expect("backward set a gradient"))))
        .collect();
    for (k, (name, grad)) in grads.iter().enumerate() {
        for (i, &analytic) in grad.iter().enumerate() {
            let original = module.parameters()[k].value.clone();
            let mut eval = |delta: f64| {
                module.parameters_mut()[k].value = with_element(&original, i, delta);
                objective(module, x, &r, reset)
            };
            let numeric = (eval(H) - eval(-H)) / (2.0 * H);
            module.parameters_mut()[k].value = original;
            assert_close(analytic, numeric, &format!("d/d{name}[{i}]"));
        }
    }
}

fn generator(seed: u64) -> Generator {
    Generator::from_key(Device::Cpu, Key::new(seed))
}

#[test]
fn linear_backward_matches_finite_differences() {
    let mut layer = Linear::with_options(5, 3, true, DType::F64, &generator(1)).unwrap();
    check_module(&mut layer, &uniform(&[4, 5], -1.0, 1.0, 2), &|| {});
    let mut no_bias = Linear::with_options(3, 2, false, DType::F64, &generator(3)).unwrap();
    assert_eq!(no_bias.parameters().len(), 1);
    check_module(&mut no_bias, &uniform(&[2, 3], -1.0, 1.0, 4), &|| {});
}

#[test]
fn relu_backward_matches_finite_differences() {
    // Keep inputs away from the kink at 0, where the derivative is not defined.
    let x = uniform(&[3, 7], -1.0, 1.0, 5);
    let x = Tensor::from_vec(
        values(&x)
            .into_iter()
            .map(|v| if v.abs() < 0.01 { v + 0.05 } else { v })
            .collect(),
        &[3, 7],
        Device::Cpu,
    )
    .unwrap();
    check_module(&mut ReLU::new(), &x, &|| {});
}

#[test]
fn dropout_backward_matches_finite_differences() {
    let g = generator(6);
    let start = g.key();
    let mut layer = Dropout::new(0.3, &g).unwrap();
    let reset = || g.set_key(start);
    check_module(&mut layer, &uniform(&[4, 9], -1.0, 1.0, 7), &reset);
    // Some elements were dropped and some kept, so the check was not trivial.
    reset();
    let y = values(
        &layer
            .forward(
                &Tensor::ones(&[4, 9], DType::F64, Device::Cpu).unwrap(),
                true,
            )
            .unwrap(),
    );
    assert!(y.contains(&0.0) && y.iter().any(|&v| v > 1.0));
}

#[test]
fn sequential_backward_matches_finite_differences() {
    let init = generator(8);
    let drop = generator(9);
    let start = drop.key();
    let mut model = Sequential::new()
        .push(Linear::with_options(4, 6, true, DType::F64, &init).unwrap())
        .push(ReLU::new())
        .push(Dropout::new(0.25, &drop).unwrap())
        .push(Linear::with_options(6, 3, true, DType::F64, &init).unwrap());
    let names: Vec<String> = model
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["0.weight", "0.bias", "3.weight", "3.bias"]);
    check_module(&mut model, &uniform(&[5, 4], -1.0, 1.0, 10), &|| {
        drop.set_key(start)
    });
}

/// Checks a loss's gradient with respect to its prediction.
fn check_loss(loss: &dyn Fn(&Tensor) -> (Tensor, Tensor), pred: &Tensor) {
    let (_, grad) = loss(pred);
    let grad = values(&grad);
    let value = |p: &Tensor| loss(p).0.to_scalar::<f64>().unwrap();
    for (i, &analytic) in grad.iter().enumerate() {
        let numeric =
            (value(&with_element(pred, i, H)) - value(&with_element(pred, i, -H))) / (2.0 * H);
        assert_close(analytic, numeric, &format!("dloss/dpred[{i}]"));
    }
}

#[test]
fn cross_entropy_value_and_gradient() {
    let logits = uniform(&[5, 4], -3.0, 3.0, 11);
    let targets = Tensor::from_vec(vec![0i64, 3, 1, 1, 2], &[5], Device::Cpu).unwrap();
    check_loss(&|p| cross_entropy(p, &targets).unwrap(), &logits);
    // The value against a direct f64 computation of -mean(log softmax[target]).
    let (loss, _) = cross_entropy(&logits, &targets).unwrap();
    let l = values(&logits);
    let t = targets.to_vec::<i64>().unwrap();
    let direct: f64 = (0..5)
        .map(|row| {
            let r = &l[row * 4..row * 4 + 4];
            let max = r.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let lse = max + r.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
            lse - r[t[row] as usize]
        })
        .sum::<f64>()
        / 5.0;
    assert_close(
        loss.to_scalar::<f64>().unwrap(),
        direct,
        "cross-entropy value",
    );
    // Huge logits do not overflow.
    let big =
        Tensor::from_vec(vec![1000.0f64, -1000.0, 0.0, 1000.0], &[2, 2], Device::Cpu).unwrap();
    let t2 = Tensor::from_vec(vec![0i64, 1], &[2], Device::Cpu).unwrap();
    let (loss, grad) = cross_entropy(&big, &t2).unwrap();
    assert!(loss.to_scalar::<f64>().unwrap().is_finite());
    assert!(values(&grad).iter().all(|g| g.is_finite()));
}

#[test]
fn cross_entropy_rejects_bad_targets() {
    let logits = uniform(&[2, 3], -1.0, 1.0, 12);
    for bad in [vec![0i64, 3], vec![-1, 0]] {
        let t = Tensor::from_vec(bad, &[2], Device::Cpu).unwrap();
        assert!(matches!(
            cross_entropy(&logits, &t),
            Err(NnError::InvalidTarget { .. })
        ));
    }
    let wrong_len = Tensor::from_vec(vec![0i64], &[1], Device::Cpu).unwrap();
    assert!(matches!(
        cross_entropy(&logits, &wrong_len),
        Err(NnError::InvalidArgument { .. })
    ));
    let float_targets = Tensor::zeros(&[2], DType::F64, Device::Cpu).unwrap();
    assert!(cross_entropy(&logits, &float_targets).is_err());
}

#[test]
fn mse_value_and_gradient() {
    let pred = uniform(&[3, 4], -2.0, 2.0, 13);
    let target = uniform(&[3, 4], -2.0, 2.0, 14);
    check_loss(&|p| mse_loss(p, &target).unwrap(), &pred);
    let direct: f64 = values(&pred)
        .iter()
        .zip(values(&target))
        .map(|(p, t)| (p - t) * (p - t))
        .sum::<f64>()
        / 12.0;
    assert_close(
        mse_loss(&pred, &target)
            .unwrap()
            .0
            .to_scalar::<f64>()
            .unwrap(),
        direct,
        "mse value",
    );
    assert!(mse_loss(&pred, &uniform(&[4, 3], 0.0, 1.0, 15)).is_err());
}

#[test]
fn gradients_accumulate_until_zero_grad() {
    let mut layer = Linear::with_options(3, 2, true, DType::F64, &generator(16)).unwrap();
    let x = uniform(&[4, 3], -1.0, 1.0, 17);
    let r = uniform(&[4, 2], -1.0, 1.0, 18);
    layer.forward(&x, true).unwrap();
    layer.backward(&r).unwrap();
    let once = values(layer.weight().grad.as_ref().unwrap());
    layer.forward(&x, true).unwrap();
    layer.backward(&r).unwrap();
    let twice = values(layer.weight().grad.as_ref().unwrap());
    for (a, b) in once.iter().zip(&twice) {
        assert_eq!(2.0 * a, *b);
    }
    layer.zero_grad();
    assert!(layer.parameters().iter().all(|p| p.grad.is_none()));
}

#[test]
fn backward_needs_a_training_forward() {
    let x = uniform(&[2, 3], -1.0, 1.0, 19);
    let g = Tensor::ones(&[2, 3], DType::F64, Device::Cpu).unwrap();
    let mut relu = ReLU::new();
    assert!(matches!(
        relu.backward(&g),
        Err(NnError::BackwardWithoutForward { layer: "ReLU" })
    ));
    relu.forward(&x, false).unwrap();
    assert!(relu.backward(&g).is_err(), "eval forward saves nothing");
    relu.forward(&x, true).unwrap();
    relu.backward(&g).unwrap();
    assert!(
        relu.backward(&g).is_err(),
        "a backward consumes the saved forward"
    );
}

#[test]
fn eval_mode_dropout_is_identity_and_draws_nothing() {
    let g = generator(20);
    let before = g.key();
    let mut layer = Dropout::new(0.5, &g).unwrap();
    let x = uniform(&[3, 3], -1.0, 1.0, 21);
    assert_eq!(values(&layer.forward(&x, false).unwrap()), values(&x));
    assert_eq!(g.key(), before);
    layer.forward(&x, true).unwrap();
    assert_ne!(g.key(), before, "training mode reserves from the generator");
    assert!(Dropout::new(1.5, &g).is_err());
    assert!(Dropout::new(f64::NAN, &g).is_err());
}

#[test]
fn linear_init_is_pytorch_default_from_the_generator() {
    let (fan_in, fan_out) = (50, 40);
    let g = generator(22);
    let start = g.key();
    let layer = Linear::new(fan_in, fan_out, &g).unwrap();
    let bound = 1.0 / (fan_in as f64).sqrt();
    // Same draws, in the same order, as uniform(-bound, bound) for the weight then the bias.
    let replay = Generator::from_key(Device::Cpu, start);
    let draw = |dims: &[usize]| {
        rng_gen::uniform(dims, -bound, bound, DType::F32, Device::Cpu, Some(&replay)).unwrap()
    };
    let w = draw(&[fan_out, fan_in]);
    let b = draw(&[fan_out]);
    assert_eq!(
        layer.weight().value.to_vec::<f32>().unwrap(),
        w.to_vec::<f32>().unwrap()
    );
    assert_eq!(
        layer.bias().unwrap().value.to_vec::<f32>().unwrap(),
        b.to_vec::<f32>().unwrap()
    );
    assert_eq!(g.key(), replay.key());
    let weights = w.to_vec::<f32>().unwrap();
    assert!(weights.iter().all(|&v| f64::from(v).abs() <= bound));
    // U(-b, b) has variance b^2 / 3; 2000 draws land well within 10% of it.
    let var = weights.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / weights.len() as f64;
    assert!(
        (var / (bound * bound / 3.0) - 1.0).abs() < 0.1,
        "variance {var}"
    );
    assert!(Linear::new(0, 3, &g).is_err());
}

#[test]
fn stored_and_regenerated_dropout_masks_agree() {
    let x = uniform(&[16, 33], -1.0, 1.0, 23);
    let r = uniform(&[16, 33], -1.0, 1.0, 24);
    let run = |store: bool| {
        let g = generator(25);
        let mut layer = Dropout::new(0.4, &g).unwrap().store_mask(store);
        let y = values(&layer.forward(&x, true).unwrap());
        let gx = values(&layer.backward(&r).unwrap());
        (y, gx, g.key())
    };
    assert_eq!(run(true), run(false));
}

#[test]
fn backward_params_accumulates_the_same_gradients() {
    let build = || {
        let init = generator(26);
        Sequential::new()
            .push(Linear::with_options(4, 6, true, DType::F64, &init).unwrap())
            .push(ReLU::new())
            .push(Linear::with_options(6, 3, true, DType::F64, &init).unwrap())
    };
    let x = uniform(&[5, 4], -1.0, 1.0, 27);
    let r = uniform(&[5, 3], -1.0, 1.0, 28);
    let (mut a, mut b) = (build(), build());
    a.forward(&x, true).unwrap();
    a.backward(&r).unwrap();
    b.forward(&x, true).unwrap();
    b.backward_params(&r).unwrap();
    for (pa, pb) in a.parameters().iter().zip(b.parameters()) {
        assert_eq!(
            values(pa.grad.as_ref().unwrap()),
            values(pb.grad.as_ref().unwrap())
        );
    }
    assert!(
        b.backward_params(&r).is_err(),
        "the saved forward was consumed"
    );
}

// ---- the GPT's layers (issue 30) ----

use nn_mini::gpt::{Block, CausalSelfAttention, Gpt, GptConfig, Mlp};
use nn_mini::{Gelu, LayerNorm};

/// An f64 `Linear` `[out, in]` with a bias, drawn from generator `seed`.
fn linear(inp: usize, out: usize, seed: u64) -> Linear {
    Linear::with_options(inp, out, true, DType::F64, &generator(seed)).unwrap()
}

#[test]
fn layer_norm_backward_matches_finite_differences() {
    let weight = uniform(&[6], 0.5, 1.5, 30);
    let bias = uniform(&[6], -0.5, 0.5, 31);
    let mut layer = LayerNorm::from_tensors(weight, Some(bias), 1e-5).unwrap();
    check_module(&mut layer, &uniform(&[2, 3, 6], -2.0, 2.0, 32), &|| {});
    let names: Vec<String> = layer
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["weight", "bias"]);
}

#[test]
fn gelu_backward_matches_finite_differences() {
    check_module(&mut Gelu::tanh(), &uniform(&[4, 5], -4.0, 4.0, 33), &|| {});
}

#[test]
fn causal_self_attention_backward_matches_finite_differences() {
    let drop = generator(34);
    let start = drop.key();
    let (width, heads) = (8, 2);
    let mut attn = CausalSelfAttention::new(
        linear(width, 3 * width, 35),
        linear(width, width, 36),
        heads,
        0.2,
        &drop,
    )
    .unwrap();
    let x = uniform(&[2, 5, width], -1.0, 1.0, 37);
    check_module(&mut attn, &x, &|| drop.set_key(start));
    // The output at position t depends on positions <= t only (the mask is causal).
    let mut y = |x: &Tensor| {
        drop.set_key(start);
        values(&attn.forward(x, false).unwrap())
    };
    let base = y(&x);
    let later = with_element(&x, 4 * width + 3, 0.5); // row 0, position 4
    let changed = y(&later);
    assert_eq!(&base[..4 * width], &changed[..4 * width]);
    assert_ne!(&base[4 * width..5 * width], &changed[4 * width..5 * width]);
    assert!(CausalSelfAttention::new(linear(8, 24, 1), linear(8, 8, 2), 3, 0.0, &drop).is_err());
}

#[test]
fn mlp_and_block_backward_match_finite_differences() {
    let drop = generator(38);
    let start = drop.key();
    let width = 4;
    let mut mlp = Mlp::new(
        linear(width, 4 * width, 39),
        linear(4 * width, width, 40),
        0.25,
        &drop,
    )
    .unwrap();
    check_module(&mut mlp, &uniform(&[2, 3, width], -1.0, 1.0, 41), &|| {
        drop.set_key(start)
    });
    let ln = || LayerNorm::with_options(width, true, 1e-5, DType::F64, Device::Cpu).unwrap();
    let attn = CausalSelfAttention::new(
        linear(width, 3 * width, 42),
        linear(width, width, 43),
        2,
        0.25,
        &drop,
    )
    .unwrap();
    let mlp = Mlp::new(
        linear(width, 4 * width, 44),
        linear(4 * width, width, 45),
        0.25,
        &drop,
    )
    .unwrap();
    let mut block = Block::new(ln(), attn, ln(), mlp);
    let names: Vec<String> = block
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "ln_1.weight",
            "ln_1.bias",
            "attn.c_attn.weight",
            "attn.c_attn.bias",
            "attn.c_proj.weight",
            "attn.c_proj.bias",
            "ln_2.weight",
            "ln_2.bias",
            "mlp.c_fc.weight",
            "mlp.c_fc.bias",
            "mlp.c_proj.weight",
            "mlp.c_proj.bias",
        ]
    );
    check_module(&mut block, &uniform(&[2, 3, width], -1.0, 1.0, 46), &|| {
        drop.set_key(start)
    });
}

/// Every parameter gradient of a model over token indices (no input gradient to check).
fn check_token_model(model: &mut dyn Module, tokens: &Tensor, reset: &dyn Fn()) {
    reset();
    let y = model.forward(tokens, true).unwrap();
    let r = uniform(y.dims(), -1.0, 1.0, 98);
    model.zero_grad();
    model.backward(&r).unwrap();
    let grads: Vec<(String, Vec<f64>)> = model
        .named_parameters()
        .into_iter()
        .map(|(n, p)| (n, values(p.grad.as_ref().expect("backward set a gradient"))))
        .collect();
    for (k, (name, grad)) in grads.iter().enumerate() {
        // Every element of the small tensors, a stride through the larger ones.
        let step = (grad.len() / 12).max(1);
        for i in (0..grad.len()).step_by(step) {
            let original = model.parameters()[k].value.clone();
            let mut eval = |delta: f64| {
                model.parameters_mut()[k].value = with_element(&original, i, delta);
                objective(model, tokens, &r, reset)
            };
            let numeric = (eval(H) - eval(-H)) / (2.0 * H);
            model.parameters_mut()[k].value = original;
            assert_close(grad[i], numeric, &format!("d/d{name}[{i}]"));
        }
    }
}

#[test]
fn gpt_backward_matches_finite_differences_with_the_head_tied() {
    let config = GptConfig {
        vocab_size: 7,
        block_size: 6,
        n_layer: 2,
        n_head: 2,
        n_embd: 4,
        dropout: 0.2,
        bias: true,
        precision: nn_mini::gpt::Precision::F32,
    };
    let drop = generator(47);
    let start = drop.key();
    let mut gpt = Gpt::with_dtype(&config, DType::F64, &generator(48), &drop).unwrap();
    let shapes = config.parameter_shapes();
    let named: Vec<(String, Vec<usize>)> = gpt
        .named_parameters()
        .into_iter()
        .map(|(n, p)| (n, p.value.dims().to_vec()))
        .collect();
    assert_eq!(named, shapes);
    assert_eq!(named[0].0, "transformer.wte.weight");
    let tokens =
        Tensor::from_vec(vec![1i64, 5, 0, 6, 2, 2, 3, 0, 1, 4], &[2, 5], Device::Cpu).unwrap();
    check_token_model(&mut gpt, &tokens, &|| drop.set_key(start));
    let too_long = Tensor::zeros(&[1, 7], DType::I64, Device::Cpu).unwrap();
    let err = gpt.forward(&too_long, false).unwrap_err().to_string();
    assert!(
        err.contains("does not fit the position table of block_size 6"),
        "{err}"
    );
}
