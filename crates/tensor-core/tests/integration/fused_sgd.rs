//! `Tensor::sgd_momentum_step_` against the same rule written with whole-tensor ops
//! (`scale_`, `axpy_`), bit for bit, and its refusals.

use tensor_core::ops::SgdMomentumStep;
use tensor_core::{DType, Device, Tensor, TensorError};
use test_support::on_threads;

fn tensor(n: usize, salt: u32, dtype: DType) -> Tensor {
    let values: Vec<f64> = (0..n)
        .map(|i| ((i as f64 + 1.0) * (f64::from(salt) + 0.37)).sin() * 3.0)
        .collect();
    Tensor::from_vec(values, &[n / 7, 7], Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

/// The rule as `Sgd::step` writes it for a parameter past its first step.
fn whole_tensor_ops(p: &mut Tensor, buf: &mut Tensor, g: &Tensor, h: &SgdMomentumStep) {
    let mut d = g.clone();
    if h.weight_decay != 0.0 {
        d.axpy_(h.weight_decay, p).unwrap();
    }
    buf.scale_(h.momentum).unwrap();
    buf.axpy_(1.0 - h.dampening, &d).unwrap();
    if h.nesterov {
        d.axpy_(h.momentum, buf).unwrap();
    } else {
        d = buf.clone();
    }
    p.axpy_(-h.lr, &d).unwrap();
}

fn bits(t: &Tensor) -> Vec<u64> {
    let t = t.to_dtype(DType::F64).unwrap();
    t.to_vec::<f64>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

#[test]
fn equals_the_whole_tensor_ops_for_every_option() {
    for dtype in [DType::F32, DType::F64] {
        for (weight_decay, dampening, nesterov) in [
            (0.0, 0.0, false),
            (1e-3, 0.1, false),
            (0.0, 0.0, true),
            (5e-4, 0.0, true),
        ] {
            let h = SgdMomentumStep {
                lr: 0.05,
                momentum: 0.9,
                dampening,
                weight_decay,
                nesterov,
            };
            let (mut p, mut b) = (tensor(70, 1, dtype), tensor(70, 2, dtype));
            let (mut want_p, mut want_b) = (p.clone(), b.clone());
            for step in 0..3 {
                let g = tensor(70, 10 + step, dtype);
                p.sgd_momentum_step_(&mut b, &g, &h).unwrap();
                whole_tensor_ops(&mut want_p, &mut want_b, &g, &h);
            }
            let what = format!("{dtype:?} {h:?}");
            assert_eq!(bits(&p), bits(&want_p), "parameter, {what}");
            assert_eq!(bits(&b), bits(&want_b), "buffer, {what}");
        }
    }
}

#[test]
fn clones_keep_their_values() {
    let h = SgdMomentumStep {
        lr: 0.1,
        momentum: 0.5,
        dampening: 0.0,
        weight_decay: 0.0,
        nesterov: false,
    };
    let (mut p, mut b, g) = (
        tensor(14, 1, DType::F32),
        tensor(14, 2, DType::F32),
        tensor(14, 3, DType::F32),
    );
    let (p0, b0) = (p.clone(), b.clone());
    p.sgd_momentum_step_(&mut b, &g, &h).unwrap();
    assert_ne!(bits(&p), bits(&p0));
    assert_eq!(
        bits(&p0),
        bits(&tensor(14, 1, DType::F32)),
        "the parameter's clone"
    );
    assert_eq!(
        bits(&b0),
        bits(&tensor(14, 2, DType::F32)),
        "the buffer's clone"
    );
}

#[test]
fn refuses_what_it_cannot_do_and_writes_nothing() {
    let h = SgdMomentumStep {
        lr: 0.1,
        momentum: 0.9,
        dampening: 0.0,
        weight_decay: 0.0,
        nesterov: false,
    };
    let p0 = tensor(14, 1, DType::F32);
    let b0 = tensor(14, 2, DType::F32);
    let g = tensor(14, 3, DType::F32);
    let check = |result: tensor_core::Result<()>, p: &Tensor, what: &str| {
        assert!(result.is_err(), "{what}: accepted");
        assert_eq!(bits(p), bits(&p0), "{what}: wrote the parameter");
    };

    let (mut p, mut b) = (p0.clone(), b0.clone());
    let r = p.sgd_momentum_step_(&mut b, &g.t().unwrap(), &h);
    assert!(matches!(r, Err(TensorError::ShapeMismatch { .. })), "{r:?}");
    check(r, &p, "transposed gradient");

    let (mut p, mut b) = (p0.clone(), b0.clone());
    let strided = tensor(28, 4, DType::F32).narrow(0, 0, 2).unwrap();
    let strided = strided.t().unwrap().contiguous().unwrap().t().unwrap();
    let r = p.sgd_momentum_step_(&mut b, &strided, &h);
    assert!(matches!(r, Err(TensorError::NotContiguous { .. })), "{r:?}");
    check(r, &p, "strided gradient");

    let (mut p, mut b) = (p0.clone(), b0.clone());
    let r = p.sgd_momentum_step_(&mut b, &g.to_dtype(DType::F64).unwrap(), &h);
    assert!(matches!(r, Err(TensorError::DTypeMismatch { .. })), "{r:?}");
    check(r, &p, "f64 gradient");

    let (mut p, mut b) = (p0.clone(), b0.clone());
    let r = p.sgd_momentum_step_(&mut b, &g, &SgdMomentumStep { momentum: 0.0, ..h });
    assert!(
        matches!(r, Err(TensorError::InvalidArgument { .. })),
        "{r:?}"
    );
    check(r, &p, "momentum 0");

    let (mut p, mut b) = (
        p0.to_dtype(DType::F16).unwrap(),
        b0.to_dtype(DType::F16).unwrap(),
    );
    let r = p.sgd_momentum_step_(&mut b, &g.to_dtype(DType::F16).unwrap(), &h);
    assert!(
        matches!(r, Err(TensorError::UnsupportedDType { .. })),
        "{r:?}"
    );
}

/// A parameter long enough to be cut into one piece per thread (2^18 elements and more),
/// with a ragged length, on pools of 1, 2 and 3 threads: each equals the whole-tensor
/// ops, so the pieces neither skip nor repeat an element.
#[test]
fn long_parameters_on_several_threads_equal_the_whole_tensor_ops() {
    let h = SgdMomentumStep {
        lr: 0.05,
        momentum: 0.9,
        dampening: 0.1,
        weight_decay: 1e-3,
        nesterov: true,
    };
    let n = 7 * ((1 << 18) / 7 + 1001);
    let (p0, b0) = (tensor(n, 3, DType::F32), tensor(n, 4, DType::F32));
    let g = tensor(n, 5, DType::F32);
    let (mut want_p, mut want_b) = (p0.clone(), b0.clone());
    whole_tensor_ops(&mut want_p, &mut want_b, &g, &h);
    for threads in [1, 2, 3] {
        let (mut p, mut b) = (p0.clone(), b0.clone());
        on_threads(threads, || p.sgd_momentum_step_(&mut b, &g, &h)).unwrap();
        assert_eq!(bits(&p), bits(&want_p), "parameter, {threads} threads");
        assert_eq!(bits(&b), bits(&want_b), "buffer, {threads} threads");
    }
}
