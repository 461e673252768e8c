//! tensor-core's CUDA kernel bodies (`crates/tensor-core/cuda/tensor_ops.cuh`), compiled
//! for the host, against the CPU ops, bit for bit (docs/contract.md §11).
//!
//! The host shim runs each kernel's loop with the arguments the CUDA launchers build, so
//! this checks the GPU code's indexing, broadcasting, order of sums and NaN handling on
//! any machine. On the host `exp` / `log` are the C library's, which is what Rust's
//! `f32::exp` calls too; on a GPU they are libdevice's (compared within a few ulp by the
//! GPU tests in `crates/tensor-core/tests/integration/cuda.rs`).

use crate::support;

use ::host_parity::tensor_ops as host_parity;
use ditto::tensor_core::ops::SgdMomentumStep;
use ditto::tensor_core::{DType, Device, Tensor};
use support::{assert_same, values};

/// Test data with NaNs, zeros and ties (host arithmetic keeps NaN payloads like Rust's).
fn cpu(dims: &[usize], salt: u64) -> Tensor {
    Tensor::from_vec(values(dims.iter().product(), salt, true), dims, Device::Cpu).unwrap()
}

fn same(what: &str, want: &Tensor, got: &Tensor) {
    assert_same(what, got, want);
}

#[test]
fn binary_bodies_broadcast_and_read_views_like_the_cpu() {
    let a = cpu(&[3, 4, 5], 1);
    let operands = [
        cpu(&[3, 4, 5], 2),
        cpu(&[5], 3),
        cpu(&[3, 1, 1], 4),
        cpu(&[1, 4, 1], 5),
        cpu(&[5, 4], 6).t().unwrap(),
        cpu(&[3, 9, 5], 7).narrow(1, 2, 4).unwrap(),
        cpu(&[1], 8),
    ];
    for op in ["add", "sub", "mul", "div"] {
        for (i, rhs) in operands.iter().enumerate() {
            let want = match op {
                "add" => a.add(rhs),
                "sub" => a.sub(rhs),
                "mul" => a.mul(rhs),
                _ => a.div(rhs),
            }
            .unwrap();
            same(
                &format!("{op} #{i}"),
                &want,
                &host_parity::binary(op, &a, rhs).unwrap(),
            );
            // And with the broadcast operand on the left.
            let want = match op {
                "add" => rhs.add(&a),
                "sub" => rhs.sub(&a),
                "mul" => rhs.mul(&a),
                _ => rhs.div(&a),
            }
            .unwrap();
            same(
                &format!("{op} #{i} swapped"),
                &want,
                &host_parity::binary(op, rhs, &a).unwrap(),
            );
        }
    }
    let d = a.to_dtype(DType::F64).unwrap();
    same(
        "add f64",
        &d.add(&d).unwrap(),
        &host_parity::binary("add", &d, &d).unwrap(),
    );
    assert!(host_parity::binary("pow", &a, &a).is_err());
}

#[test]
fn unary_bodies_match_the_cpu() {
    let x = cpu(&[9, 31], 10);
    let pos = x.mul(&x).unwrap().add_scalar(0.25).unwrap();
    let cases: [(&str, Tensor, Tensor); 10] = [
        (
            "relu",
            x.relu().unwrap(),
            host_parity::unary("relu", &x, 0.0, 0.0).unwrap(),
        ),
        (
            "neg",
            x.neg().unwrap(),
            host_parity::unary("neg", &x, 0.0, 0.0).unwrap(),
        ),
        (
            "affine",
            x.affine(0.3, -1.7).unwrap(),
            host_parity::unary("affine", &x, 0.3, -1.7).unwrap(),
        ),
        (
            "mul_scalar",
            x.mul_scalar(-0.1).unwrap(),
            host_parity::unary("mul_scalar", &x, -0.1, 0.0).unwrap(),
        ),
        (
            "add_scalar",
            x.add_scalar(2.5).unwrap(),
            host_parity::unary("add_scalar", &x, 2.5, 0.0).unwrap(),
        ),
        (
            "sqrt",
            pos.sqrt().unwrap(),
            host_parity::unary("sqrt", &pos, 0.0, 0.0).unwrap(),
        ),
        (
            "exp",
            x.exp().unwrap(),
            host_parity::unary("exp", &x, 0.0, 0.0).unwrap(),
        ),
        (
            "log",
            pos.log().unwrap(),
            host_parity::unary("log", &pos, 0.0, 0.0).unwrap(),
        ),
        (
            "powf",
            pos.powf(1.5).unwrap(),
            host_parity::unary("powf", &pos, 1.5, 0.0).unwrap(),
        ),
        (
            "round_to_bf16",
            x.round_to_bf16().unwrap(),
            host_parity::unary("round_to_bf16", &x, 0.0, 0.0).unwrap(),
        ),
    ];
    for (name, want, got) in &cases {
        same(name, want, got);
    }
    let grad = cpu(&[9, 31], 11);
    same(
        "relu_backward",
        &Tensor::relu_backward(&grad, &x).unwrap(),
        &host_parity::relu_backward(&grad, &x).unwrap(),
    );
    let mut updated = x.clone();
    updated.axpy_(-0.05, &grad).unwrap();
    same(
        "axpy",
        &updated,
        &host_parity::axpy(&x, -0.05, &grad).unwrap(),
    );
    for nesterov in [false, true] {
        let hyper = SgdMomentumStep {
            lr: 0.05,
            momentum: 0.9,
            dampening: if nesterov { 0.0 } else { 0.1 },
            weight_decay: 1e-3,
            nesterov,
        };
        let (mut p, mut b) = (x.clone(), cpu(&[9, 31], 12));
        let (host_p, host_b) = host_parity::sgd_momentum_step(&p, &b, &grad, &hyper).unwrap();
        p.sgd_momentum_step_(&mut b, &grad, &hyper).unwrap();
        same("sgd_momentum_step parameter", &p, &host_p);
        same("sgd_momentum_step buffer", &b, &host_b);
    }
    // A strided input is made dense first, as the launcher does.
    let t = x.t().unwrap();
    same(
        "relu of t()",
        &t.relu().unwrap(),
        &host_parity::unary("relu", &t, 0.0, 0.0).unwrap(),
    );
}

#[test]
fn sum_bodies_follow_the_cpu_blocked_order() {
    // 2500 along dim 1 is three REDUCE_BLOCKs; 3000 elements in one lane for sum_all.
    let x = cpu(&[3, 2500, 5], 20).relu().unwrap(); // no NaN: sums must be finite
    let x = x.mul(&x.add_scalar(1.0).unwrap()).unwrap();
    for dim in 0..3 {
        same(
            &format!("sum dim {dim}"),
            &x.sum_dim(dim, false).unwrap(),
            &host_parity::sum_dim(&x, Some(dim), false).unwrap(),
        );
        same(
            &format!("mean dim {dim}"),
            &x.mean_dim(dim, false).unwrap(),
            &host_parity::sum_dim(&x, Some(dim), true).unwrap(),
        );
    }
    same(
        "sum_all",
        &x.sum_all().unwrap(),
        &host_parity::sum_dim(&x, None, false).unwrap(),
    );
    same(
        "mean_all",
        &x.mean_all().unwrap(),
        &host_parity::sum_dim(&x, None, true).unwrap(),
    );
    let v = x.narrow(1, 7, 2000).unwrap().transpose(0, 2).unwrap();
    same(
        "sum of a strided view",
        &v.sum_dim(1, false).unwrap(),
        &host_parity::sum_dim(&v, Some(1), false).unwrap(),
    );
    // f64 values with all 53 bits in use and magnitudes from 1e-6 to 1e6 of both signs,
    // so additions round and cancel: any other order of the blocks (or within them)
    // changes the result.
    let wide: Vec<f64> = (0..3 * 2500 * 5u64)
        .map(|i| {
            let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i >> 3);
            let unit = (h >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
            unit * 10f64.powi((i % 13) as i32 - 6)
        })
        .collect();
    let d = Tensor::from_vec(wide, &[3, 2500, 5], Device::Cpu).unwrap();
    for dim in 0..3 {
        same(
            &format!("sum f64 dim {dim}"),
            &d.sum_dim(dim, false).unwrap(),
            &host_parity::sum_dim(&d, Some(dim), false).unwrap(),
        );
    }
    same(
        "sum_all f64",
        &d.sum_all().unwrap(),
        &host_parity::sum_dim(&d, None, false).unwrap(),
    );
    same(
        "sum f64",
        &d.sum_dim(1, false).unwrap(),
        &host_parity::sum_dim(&d, Some(1), false).unwrap(),
    );
    // An empty reduced dimension: sum 0, mean NaN, as on the CPU.
    let e = Tensor::zeros(&[2, 0, 3], DType::F32, Device::Cpu).unwrap();
    same(
        "empty sum",
        &e.sum_dim(1, false).unwrap(),
        &host_parity::sum_dim(&e, Some(1), false).unwrap(),
    );
    same(
        "empty mean",
        &e.mean_dim(1, false).unwrap(),
        &host_parity::sum_dim(&e, Some(1), true).unwrap(),
    );
}

#[test]
fn max_and_log_softmax_bodies_match_the_cpu_with_nans_and_ties() {
    let x = cpu(&[4, 300, 3], 30); // holds NaNs, zeros and repeated 1.5s
    for dim in 0..3 {
        let (values, indices) = host_parity::max_dim(&x, dim).unwrap();
        same(
            &format!("max dim {dim}"),
            &x.max_dim(dim, false).unwrap(),
            &values,
        );
        same(
            &format!("argmax dim {dim}"),
            &x.argmax(dim).unwrap(),
            &indices,
        );
    }
    let logits = cpu(&[128, 10], 31).mul_scalar(4.0).unwrap();
    for dim in [0, 1] {
        same(
            &format!("log_softmax dim {dim}"),
            &logits.log_softmax(dim).unwrap(),
            &host_parity::log_softmax(&logits, dim).unwrap(),
        );
    }
    same(
        "log_softmax with NaN lanes",
        &x.log_softmax(1).unwrap(),
        &host_parity::log_softmax(&x, 1).unwrap(),
    );
    let long = cpu(&[2, 2100], 32).relu().unwrap();
    same(
        "log_softmax over 3 blocks",
        &long.log_softmax(1).unwrap(),
        &host_parity::log_softmax(&long, 1).unwrap(),
    );
}

#[test]
fn the_gather_body_reads_views_in_row_major_order() {
    let base = cpu(&[6, 7, 8], 40);
    let views = [
        base.narrow(2, 1, 5).unwrap(),
        base.transpose(0, 2).unwrap(),
        base.narrow(1, 2, 3).unwrap().transpose(1, 2).unwrap(),
        base.narrow(0, 5, 1).unwrap(),
    ];
    for (i, v) in views.iter().enumerate() {
        same(
            &format!("gather #{i}"),
            &v.contiguous().unwrap(),
            &host_parity::gather(v).unwrap(),
        );
    }
}

/// Index data for `gather` along dim 1 of a `[rows, cols]` source: deterministic, every
/// column used.
fn picks(rows: usize, k: usize, cols: usize) -> Tensor {
    let values = (0..rows * k).map(|i| ((i * 7 + 3) % cols) as i64).collect();
    Tensor::from_vec(values, &[rows, k], Device::Cpu).unwrap()
}

#[test]
fn the_gather_index_and_one_hot_bodies_match_the_cpu() {
    for dtype in [DType::F32, DType::F64] {
        let x = cpu(&[5, 9], 50).to_dtype(dtype).unwrap();
        let sources = [
            x.clone(),
            cpu(&[9, 5], 51).to_dtype(dtype).unwrap().t().unwrap(),
            cpu(&[7, 12], 52)
                .to_dtype(dtype)
                .unwrap()
                .narrow(0, 1, 5)
                .unwrap()
                .narrow(1, 2, 9)
                .unwrap(),
        ];
        for (i, src) in sources.iter().enumerate() {
            for (dim, index) in [(1, picks(5, 3, 9)), (0, picks(2, 9, 5))] {
                same(
                    &format!("gather {dtype} #{i} dim {dim}"),
                    &src.gather(dim, &index).unwrap(),
                    &host_parity::gather_index(src, dim, &index).unwrap(),
                );
            }
        }
        let targets = Tensor::from_vec(vec![3i64, 0, 8, 8, 5], &[5], Device::Cpu).unwrap();
        same(
            &format!("one_hot {dtype}"),
            &targets.one_hot(9, dtype).unwrap(),
            &host_parity::one_hot(&targets, 9, dtype).unwrap(),
        );
    }
}

#[test]
fn out_of_range_indices_give_nan_in_the_kernel_bodies_and_errors_on_the_cpu() {
    let x = cpu(&[2, 3], 53);
    let index = Tensor::from_vec(vec![1i64, 3], &[2, 1], Device::Cpu).unwrap();
    assert!(x.gather(1, &index).is_err());
    let got = host_parity::gather_index(&x, 1, &index).unwrap();
    let got = got.to_vec::<f32>().unwrap();
    assert_eq!(got[0].to_bits(), x.to_vec::<f32>().unwrap()[1].to_bits());
    assert!(got[1].is_nan());
    let targets = Tensor::from_vec(vec![-1i64, 2], &[2], Device::Cpu).unwrap();
    assert!(targets.one_hot(3, DType::F32).is_err());
    let hot = host_parity::one_hot(&targets, 3, DType::F32).unwrap();
    let hot = hot.to_vec::<f32>().unwrap();
    assert!(hot[..3].iter().all(|v| v.is_nan()));
    assert_eq!(hot[3..], [0.0, 0.0, 1.0]);
}
