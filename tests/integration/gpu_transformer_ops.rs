//! The transformer ops' CUDA kernels (issue 30) against their CPU twins: `gelu_tanh` and
//! its backward, `layer_norm` and its backward, `causal_softmax` and its backward, the
//! batched `matmul` of attention (with the transposed views attention passes) and
//! `adamw_step_`.
//!
//! Under portable arithmetic every one must give the CPU's bits (f32). Layer norm, the
//! softmax backward and AdamW use only correctly rounded operations in a documented
//! order, so they must give the CPU's bits without it too, in f32 and f64. GELU, the
//! softmax forward and cuBLAS products are only close by default; on the stand-in the
//! softmax's `expf` and the gemm round like a GPU's, so those must differ from the CPU
//! somewhere, or the portable comparison could not fail.
//!
//! The portable switch is process-wide, so it is flipped in one test only, in a process
//! of its own (`own_process!`).
use crate::support;

use ditto::tensor_core::ops::AdamWStep;
use ditto::tensor_core::{use_portable_arithmetic, DType, Device, Tensor, TensorError};
use support::{assert_same, cpu_tensor, gpu, on_standin};

/// `f` on the CPU and on `cuda:0` (inputs moved there first); the CUDA results moved
/// back to the CPU.
fn both(inputs: &[&Tensor], f: impl Fn(&[Tensor]) -> Vec<Tensor>) -> (Vec<Tensor>, Vec<Tensor>) {
    let cpu: Vec<Tensor> = inputs.iter().map(|t| (*t).clone()).collect();
    let cuda: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.to_device(Device::Cuda(0)).unwrap())
        .collect();
    let on_cuda = f(&cuda);
    for t in &on_cuda {
        assert_eq!(t.device(), Device::Cuda(0), "the op ran on the device");
    }
    let back = on_cuda
        .iter()
        .map(|t| t.to_device(Device::Cpu).unwrap())
        .collect();
    (f(&cpu), back)
}

/// Asserts every output of `f` is bit-identical on the CPU and `cuda:0`.
fn same(what: &str, inputs: &[&Tensor], f: impl Fn(&[Tensor]) -> Vec<Tensor>) {
    let (cpu, cuda) = both(inputs, f);
    for (i, (c, g)) in cpu.iter().zip(&cuda).enumerate() {
        assert_same(&format!("{what} (output {i})"), g, c);
    }
}

/// The largest difference between the CPU and `cuda:0` over `f`'s outputs, relative to
/// the largest magnitude of that output (sums that cancel have errors of the size of
/// their terms, not of their result), and how many elements differ.
fn distance(inputs: &[&Tensor], f: impl Fn(&[Tensor]) -> Vec<Tensor>) -> (f64, usize) {
    let (cpu, cuda) = both(inputs, f);
    let (mut worst, mut differing) = (0.0f64, 0);
    for (c, g) in cpu.iter().zip(&cuda) {
        let c = c.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
        let g = g.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
        assert_eq!(c.len(), g.len());
        let scale = c.iter().fold(f64::MIN_POSITIVE, |m, x| m.max(x.abs()));
        for (x, y) in c.iter().zip(&g) {
            if x.to_bits() != y.to_bits() {
                differing += 1;
            }
            worst = worst.max((x - y).abs() / scale);
        }
    }
    (worst, differing)
}

fn f64_of(t: &Tensor) -> Tensor {
    t.to_dtype(DType::F64).unwrap()
}

/// GELU's inputs: every branch of the portable tanh (|x| tiny, below 0.2554, below
/// 0.5493, up to 10 and beyond) through `beta (x + kappa x^3)`, and signed zeros.
fn gelu_input() -> Tensor {
    let mut v = support::values(3 * 7 * 41, 11, false);
    for (i, x) in v.iter_mut().enumerate() {
        *x *= [0.05, 0.3, 1.0, 3.0, 7.0][i % 5];
    }
    v.extend([0.0, -0.0, 1e-30, -1e-30, 12.0, -12.0, 1e-5]);
    let n = v.len();
    Tensor::from_vec(v, &[n], Device::Cpu).unwrap()
}

/// GELU and its backward, plain and with a bias added in the same pass (over the input
/// as 4 rows of `len / 4`, the bias one such row of the gradient).
fn gelu(t: &[Tensor]) -> Vec<Tensor> {
    let c = t[0].elem_count() / 4;
    let rows = |x: &Tensor| x.narrow(0, 0, 4 * c).unwrap().reshape(&[4, c]).unwrap();
    let (x, g) = (rows(&t[0]), rows(&t[1]));
    let bias = t[1].narrow(0, 1, c).unwrap().contiguous().unwrap();
    vec![
        t[0].gelu_tanh().unwrap(),
        Tensor::gelu_tanh_backward(&t[1], &t[0]).unwrap(),
        x.bias_gelu_tanh(&bias).unwrap(),
        Tensor::bias_gelu_tanh_backward(&g, &x, &bias).unwrap(),
    ]
}

fn layer_norm(t: &[Tensor]) -> Vec<Tensor> {
    let (y, mean, rstd) = t[0].layer_norm(Some(&t[1]), Some(&t[2]), 1e-5).unwrap();
    let (dx, dw, db) =
        Tensor::layer_norm_backward(&t[3], &t[0], &mean, &rstd, Some(&t[1])).unwrap();
    let (plain, pm, pr) = t[0].layer_norm(None, None, 1e-5).unwrap();
    let (pdx, pdw, pdb) = Tensor::layer_norm_backward(&t[3], &t[0], &pm, &pr, None).unwrap();
    vec![y, mean, rstd, dx, dw, db, plain, pdx, pdw, pdb]
}

/// Layer norm's inputs `(x, weight, bias, grad)` for `x` of `dims`: rows longer than a
/// reduce block, and more rows than one (the parameter gradients' column sums).
fn layer_norm_inputs(dims: &[usize], salt: u64) -> [Tensor; 4] {
    let c = *dims.last().unwrap();
    [
        cpu_tensor(dims, salt)
            .mul_scalar(3.0)
            .unwrap()
            .add_scalar(0.5)
            .unwrap(),
        cpu_tensor(&[c], salt + 1),
        cpu_tensor(&[c], salt + 2),
        cpu_tensor(dims, salt + 3),
    ]
}

fn softmax(t: &[Tensor]) -> Vec<Tensor> {
    let p = t[0].causal_softmax(0.35).unwrap();
    let dx = Tensor::causal_softmax_backward(&t[1], &p, 0.35).unwrap();
    vec![p, dx]
}

/// The softmax backward alone, from the given probabilities (so the check does not
/// depend on the forward's exp).
fn softmax_backward(t: &[Tensor]) -> Vec<Tensor> {
    vec![Tensor::causal_softmax_backward(&t[1], &t[0], 0.35).unwrap()]
}

/// Attention's products on `[b, t, h, d]` activations viewed as heads (transposed
/// views, read in place): `q k^T`, `p v`, and the backward's `dy v^T`, `p^T dy`.
fn attention_products(t: &[Tensor]) -> Vec<Tensor> {
    let heads = |x: &Tensor| x.transpose(1, 2).unwrap();
    let (q, k, v) = (heads(&t[0]), heads(&t[1]), heads(&t[2]));
    let scores = q.matmul(&k.transpose(2, 3).unwrap()).unwrap();
    let out = scores.matmul(&v).unwrap();
    let d_scores = out.matmul(&v.transpose(2, 3).unwrap()).unwrap();
    let dv = scores.transpose(2, 3).unwrap().matmul(&out).unwrap();
    vec![scores, out, d_scores, dv]
}

fn attention_inputs(b: usize, t: usize, h: usize, d: usize) -> [Tensor; 3] {
    [1, 2, 3].map(|salt| cpu_tensor(&[b, t, h, d], salt * 7 + t as u64))
}

/// Batched products of contiguous operands with sizes around the portable kernel's
/// 64 x 64 tiles, and empty ones.
fn batched(t: &[Tensor]) -> Vec<Tensor> {
    vec![t[0].matmul(&t[1]).unwrap()]
}

const BATCHED: [([usize; 2], usize, usize, usize); 4] = [
    ([2, 3], 5, 7, 4),
    ([3, 1], 70, 33, 65),
    ([1, 2], 1, 1, 1),
    ([2, 2], 3, 0, 2),
];

/// Three AdamW steps on `(p, m, v)` from the gradients `t[3..6]`, with decay, without,
/// and with beta1 below 0.5 (the lerp's other branch).
fn adamw(t: &[Tensor]) -> Vec<Tensor> {
    let (mut p, mut m, mut v) = (t[0].clone(), t[1].clone(), t[2].clone());
    let steps = [(0.9, 0.1, 1), (0.9, 0.0, 2), (0.3, 0.05, 3)];
    for (i, &(beta1, weight_decay, step)) in steps.iter().enumerate() {
        let hyper = AdamWStep {
            lr: 1e-2,
            beta1,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay,
            step,
        };
        p.adamw_step_(&mut m, &mut v, &t[3 + i], &hyper).unwrap();
    }
    vec![p, m, v]
}

fn adamw_inputs(dtype: DType) -> Vec<Tensor> {
    let dims = [37, 29];
    let zeros = Tensor::zeros(&dims, DType::F32, Device::Cpu).unwrap();
    let mut inputs = vec![cpu_tensor(&dims, 40), zeros.clone(), zeros];
    inputs.extend((0..3).map(|i| cpu_tensor(&dims, 41 + i)));
    inputs
        .into_iter()
        .map(|t| t.to_dtype(dtype).unwrap())
        .collect()
}

/// Every op bit for bit under portable arithmetic (f32).
fn portable_ops_are_the_cpus_bits() {
    let x = gelu_input();
    let g = cpu_tensor(x.dims(), 12);
    same("gelu_tanh", &[&x, &g], gelu);
    for (i, dims) in [vec![3, 5, 37], vec![2, 1100], vec![1100, 8]]
        .iter()
        .enumerate()
    {
        let inputs = layer_norm_inputs(dims, 20 + 5 * i as u64);
        let refs: Vec<&Tensor> = inputs.iter().collect();
        same(&format!("layer_norm {dims:?}"), &refs, layer_norm);
    }
    // Rows of 9 keys, and of up to 300 (more than a block's 256 staged terms).
    for (dims, salt) in [([2, 3, 9, 9], 30), ([1, 1, 300, 300], 32)] {
        let scores = cpu_tensor(&dims, salt).mul_scalar(6.0).unwrap();
        let up = cpu_tensor(&dims, salt + 1);
        same(
            &format!("causal_softmax {dims:?}"),
            &[&scores, &up],
            softmax,
        );
    }
    for (b, t, h, d) in [(2, 9, 3, 4), (1, 70, 2, 33)] {
        let inputs = attention_inputs(b, t, h, d);
        let refs: Vec<&Tensor> = inputs.iter().collect();
        same(
            &format!("attention {b}x{t}x{h}x{d}"),
            &refs,
            attention_products,
        );
    }
    for (batch, m, k, n) in BATCHED {
        let dims = |r: usize, c: usize| [batch[0], batch[1], r, c];
        let (a, b) = (cpu_tensor(&dims(m, k), 50), cpu_tensor(&dims(k, n), 51));
        same(&format!("matmul {batch:?} {m}x{k}x{n}"), &[&a, &b], batched);
    }
    let inputs = adamw_inputs(DType::F32);
    let refs: Vec<&Tensor> = inputs.iter().collect();
    same("adamw_step_", &refs, adamw);
}

/// Without portable arithmetic: the correctly rounded ops keep the CPU's bits in f32
/// and f64; the others are close, and (on the stand-in) not bit-equal.
fn default_ops_are_close_and_correctly_rounded_ones_exact() {
    for dtype in [DType::F32, DType::F64] {
        let inputs = layer_norm_inputs(&[130, 67], 60).map(|t| t.to_dtype(dtype).unwrap());
        let refs: Vec<&Tensor> = inputs.iter().collect();
        same(&format!("layer_norm {dtype:?}"), &refs, layer_norm);
        let scores = f64_of(&cpu_tensor(&[2, 17, 17], 61))
            .to_dtype(dtype)
            .unwrap();
        let probs = scores.causal_softmax(0.35).unwrap();
        let up = cpu_tensor(&[2, 17, 17], 62).to_dtype(dtype).unwrap();
        same(
            &format!("causal_softmax_backward {dtype:?}"),
            &[&probs, &up],
            softmax_backward,
        );
        let inputs = adamw_inputs(dtype);
        let refs: Vec<&Tensor> = inputs.iter().collect();
        same(&format!("adamw_step_ {dtype:?}"), &refs, adamw);
    }
    let x = gelu_input();
    let g = cpu_tensor(x.dims(), 12);
    let (worst, _) = distance(&[&x, &g], gelu);
    assert!(worst < 1e-5, "gelu_tanh: relative difference {worst}");
    let (worst, _) = distance(&[&f64_of(&x), &f64_of(&g)], gelu);
    assert!(worst < 1e-12, "gelu_tanh f64: relative difference {worst}");
    let scores = cpu_tensor(&[4, 2, 40, 40], 63).mul_scalar(6.0).unwrap();
    let up = cpu_tensor(&[4, 2, 40, 40], 64);
    let (worst, softmax_differing) = distance(&[&scores, &up], softmax);
    assert!(worst < 1e-4, "causal_softmax: relative difference {worst}");
    let inputs = attention_inputs(2, 40, 2, 64);
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let (worst, matmul_differing) = distance(&refs, attention_products);
    assert!(
        worst < 1e-4,
        "attention products: relative difference {worst}"
    );
    let f64_inputs: Vec<Tensor> = inputs.iter().map(f64_of).collect();
    let refs: Vec<&Tensor> = f64_inputs.iter().collect();
    let (worst, _) = distance(&refs, attention_products);
    assert!(
        worst < 1e-12,
        "attention products f64: relative difference {worst}"
    );
    println!(
        "default paths differing from the CPU: causal_softmax {softmax_differing}, attention products {matmul_differing}"
    );
    if on_standin() {
        assert!(
            softmax_differing > 0 && matmul_differing > 0,
            "the stand-in rounds expf and sgemm like the CPU"
        );
    }
}

#[test]
fn transformer_ops_on_cuda_match_the_cpu() {
    test_support::own_process!(transformer_ops_on_cuda_match_the_cpu);
    if !gpu() {
        return;
    }
    use_portable_arithmetic(true);
    portable_ops_are_the_cpus_bits();
    use_portable_arithmetic(false);
    default_ops_are_close_and_correctly_rounded_ones_exact();
}

/// The block-per-row kernels (layer norm, the causal softmax) and the two passes of layer
/// norm's parameter gradients give the CPU's bits on any grid: one thread in all, blocks
/// of 7 threads (not a warp, and fewer than a row's elements), and more blocks than rows.
#[test]
fn row_kernels_are_the_cpus_bits_on_any_grid() {
    use ditto::tensor_core::grid::{force_tensor_ops_grid, Grid};
    test_support::own_process!(row_kernels_are_the_cpus_bits_on_any_grid);
    if !gpu() {
        return;
    }
    use_portable_arithmetic(true);
    let norm_inputs = layer_norm_inputs(&[1030, 19], 80);
    let norm_refs: Vec<&Tensor> = norm_inputs.iter().collect();
    let scores = cpu_tensor(&[2, 2, 33, 33], 81).mul_scalar(6.0).unwrap();
    let up = cpu_tensor(&[2, 2, 33, 33], 82);
    for (blocks, threads) in [(1, 1), (3, 7), (5000, 64), (2, 1024)] {
        assert!(force_tensor_ops_grid(Some(Grid { blocks, threads })));
        let grid = format!("{blocks} x {threads}");
        same(&format!("layer_norm on {grid}"), &norm_refs, layer_norm);
        same(
            &format!("causal_softmax on {grid}"),
            &[&scores, &up],
            softmax,
        );
    }
    assert!(force_tensor_ops_grid(None));
    use_portable_arithmetic(false);
}

#[test]
fn bad_operands_are_typed_errors_on_cuda() {
    if !gpu() {
        return;
    }
    let cuda = |t: Tensor| t.to_device(Device::Cuda(0)).unwrap();
    let x = cuda(cpu_tensor(&[4, 6], 70));
    let ints = cuda(Tensor::zeros(&[4, 6], DType::I64, Device::Cpu).unwrap());
    // The kernels' own dtype check (before them, every op here was NotImplementedOnDevice).
    assert!(matches!(
        ints.gelu_tanh(),
        Err(TensorError::UnsupportedDType { .. })
    ));
    assert!(matches!(
        ints.layer_norm(None, None, 1e-5),
        Err(TensorError::UnsupportedDType { .. })
    ));
    let int_scores = cuda(Tensor::zeros(&[2, 3, 3], DType::I64, Device::Cpu).unwrap());
    assert!(matches!(
        int_scores.causal_softmax(1.0),
        Err(TensorError::UnsupportedDType { .. })
    ));
    let wrong = cuda(cpu_tensor(&[5], 71));
    assert!(x.layer_norm(Some(&wrong), None, 1e-5).is_err());
    assert!(x.causal_softmax(1.0).is_err(), "not square");
    let on_cpu = cpu_tensor(&[6], 72);
    assert!(
        x.layer_norm(Some(&on_cpu), None, 1e-5).is_err(),
        "devices differ"
    );
    let a = cuda(cpu_tensor(&[2, 4, 6], 73));
    let b = cuda(cpu_tensor(&[3, 6, 2], 74));
    assert!(a.matmul(&b).is_err(), "batch dims differ");
}

/// Gradient clipping's coefficients (`Tensor::clip_coefficients`) are the CPU's bits on
/// the device: clipping, not clipping, and a non-finite norm (the factor is then 1).
#[test]
fn clip_coefficients_on_cuda_are_the_cpus() {
    if !gpu() {
        return;
    }
    let sums = cpu_tensor(&[7], 21).mul(&cpu_tensor(&[7], 21)).unwrap();
    let huge = Tensor::from_vec(vec![1.0f32, f32::INFINITY], &[2], Device::Cpu).unwrap();
    for (input, max_norm) in [(&sums, 0.5), (&sums, 1e6), (&huge, 1.0)] {
        same("clip_coefficients", &[input, &f64_of(input)], |t| {
            vec![
                t[0].clip_coefficients(max_norm).unwrap(),
                t[1].clip_coefficients(max_norm).unwrap(),
            ]
        });
    }
}

/// `adamw_step_many_` over 30 parameters of f32 and f64 (two launches for the f32 ones,
/// their own step counts and decays) gives the bits of `adamw_step_` on each, on the CPU.
#[test]
fn adamw_over_many_parameters_is_the_single_step_on_each() {
    if !gpu() {
        return;
    }
    use ditto::tensor_core::ops::{adamw_step_many_, AdamWSlot, AdamWStep};
    let shapes: Vec<Vec<usize>> = (0..30).map(|i| vec![1 + i % 5, 3 + (i * 7) % 40]).collect();
    let dtype = |i: usize| if i % 7 == 3 { DType::F64 } else { DType::F32 };
    let make = |i: usize, salt: u64| {
        cpu_tensor(&shapes[i], salt + 10 * i as u64)
            .to_dtype(dtype(i))
            .unwrap()
    };
    let hyper = |i: usize| AdamWStep {
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: if i.is_multiple_of(3) { 0.0 } else { 0.1 },
        step: 1 + i as u64 % 4,
    };
    let mut want = Vec::new();
    for i in 0..30 {
        let (mut p, mut m, mut v, g) = (
            make(i, 1),
            make(i, 2),
            make(i, 3).mul(&make(i, 3)).unwrap(),
            make(i, 4),
        );
        p.adamw_step_(&mut m, &mut v, &g, &hyper(i)).unwrap();
        want.push([p, m, v]);
    }
    let up = |t: Tensor| t.to_device(Device::Cuda(0)).unwrap();
    let mut state: Vec<[Tensor; 4]> = (0..30)
        .map(|i| {
            [
                up(make(i, 1)),
                up(make(i, 2)),
                up(make(i, 3).mul(&make(i, 3)).unwrap()),
                up(make(i, 4)),
            ]
        })
        .collect();
    let mut slots: Vec<AdamWSlot<'_>> = state
        .iter_mut()
        .enumerate()
        .map(|(i, [p, m, v, g])| AdamWSlot {
            param: p,
            exp_avg: m,
            exp_avg_sq: v,
            grad: &*g,
            hyper: hyper(i),
        })
        .collect();
    adamw_step_many_(&mut slots).unwrap();
    drop(slots);
    for (i, ([p, m, v, _], want)) in state.iter().zip(&want).enumerate() {
        for (name, got, want) in [
            ("param", p, &want[0]),
            ("exp_avg", m, &want[1]),
            ("exp_avg_sq", v, &want[2]),
        ] {
            assert_same(
                &format!("parameter {i}: {name}"),
                &got.to_device(Device::Cpu).unwrap(),
                want,
            );
        }
    }
}
