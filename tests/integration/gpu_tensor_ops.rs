//! The training ops on a CUDA GPU against the same ops on the CPU.
//!
//! Arithmetic, `relu`, sums, means, maxima and every layout op (views, broadcasting,
//! in-place writes) must match the CPU bit for bit: each output element is one thread's
//! work in the CPU's documented order. `exp` / `log` / `powf` / `log_softmax` use CUDA's
//! libdevice and `matmul` cuBLAS, so those are compared within a few ulp.
//!
//! Real tests whenever a GPU (and NVRTC) is present; otherwise each prints why it
//! skipped, and `REQUIRE_GPU=1` turns a skip into a failure.
use crate::support;

use ditto::tensor_core::ops::SgdMomentumStep;
use ditto::tensor_core::{DType, Device, Tensor, TensorError};
use support::{assert_same, bits_of, cpu_tensor, gpu, on_standin};

const GPU: Device = Device::Cuda(0);

/// `gpu` lives on the GPU and equals `cpu` bit for bit.
fn same(what: &str, cpu: &Tensor, gpu: &Tensor) {
    assert_eq!(gpu.device(), GPU, "{what}: result not on the GPU");
    assert_same(what, gpu, cpu);
}

/// Every element within `rel` relative (or `abs` absolute) of the CPU's.
fn close(what: &str, cpu: &Tensor, gpu: &Tensor, rel: f64, abs: f64) {
    assert_eq!(cpu.dims(), gpu.dims(), "{what}: dims");
    let c = cpu.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    let g = gpu.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    for (i, (a, b)) in c.iter().zip(&g).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || (a - b).abs() <= abs.max(rel * a.abs());
        assert!(ok, "{what}: element {i}: cpu {a} gpu {b}");
    }
}

fn up(t: &Tensor) -> Tensor {
    t.to_device(GPU).unwrap()
}

#[test]
fn broadcasting_arithmetic_matches_the_cpu_bit_for_bit() {
    if !gpu() {
        return;
    }
    let a = cpu_tensor(&[3, 4, 5], 1);
    let row = cpu_tensor(&[5], 2);
    let col = cpu_tensor(&[3, 1, 1], 3);
    let tr = cpu_tensor(&[5, 4], 4).t().unwrap(); // a strided (4, 5) view
    for (name, op) in [
        ("add", Tensor::add as fn(&Tensor, &Tensor) -> _),
        ("sub", Tensor::sub),
        ("mul", Tensor::mul),
        ("div", Tensor::div),
    ] {
        for rhs in [&a, &row, &col, &tr] {
            let cpu = op(&a, rhs).unwrap();
            let gpu = op(&up(&a), &up(rhs)).unwrap();
            same(&format!("{name} {:?}", rhs.dims()), &cpu, &gpu);
        }
        // The strided view uploaded as a view (to_device keeps values, not strides), so
        // also broadcast a GPU-side transpose.
        let gpu_view = up(&cpu_tensor(&[5, 4], 4)).t().unwrap();
        same(
            name,
            &op(&a, &tr).unwrap(),
            &op(&up(&a), &gpu_view).unwrap(),
        );
    }
    let f64s = a.to_dtype(DType::F64).unwrap();
    same(
        "add f64",
        &f64s.add(&f64s).unwrap(),
        &up(&f64s).add(&up(&f64s)).unwrap(),
    );
    assert!(matches!(
        up(&a).add(&up(&f64s)),
        Err(TensorError::DTypeMismatch { .. })
    ));
    assert!(matches!(
        up(&a).add(&up(&cpu_tensor(&[4], 9))),
        Err(TensorError::ShapeMismatch { .. })
    ));
}

#[test]
fn elementwise_maps_match_the_cpu() {
    if !gpu() {
        return;
    }
    let x = cpu_tensor(&[7, 129], 5);
    let g = up(&x);
    same("relu", &x.relu().unwrap(), &g.relu().unwrap());
    same("neg", &x.neg().unwrap(), &g.neg().unwrap());
    same(
        "affine",
        &x.affine(0.3, -1.7).unwrap(),
        &g.affine(0.3, -1.7).unwrap(),
    );
    same(
        "mul_scalar",
        &x.mul_scalar(-0.1).unwrap(),
        &g.mul_scalar(-0.1).unwrap(),
    );
    same(
        "add_scalar",
        &x.add_scalar(2.5).unwrap(),
        &g.add_scalar(2.5).unwrap(),
    );
    let pos = x.mul(&x).unwrap().add_scalar(1e-3).unwrap();
    same("sqrt", &pos.sqrt().unwrap(), &up(&pos).sqrt().unwrap());
    close("exp", &x.exp().unwrap(), &g.exp().unwrap(), 1e-6, 0.0);
    close(
        "log",
        &pos.log().unwrap(),
        &up(&pos).log().unwrap(),
        1e-6,
        1e-7,
    );
    close(
        "powf",
        &pos.powf(1.5).unwrap(),
        &up(&pos).powf(1.5).unwrap(),
        1e-6,
        0.0,
    );
    let grad = cpu_tensor(&[7, 129], 6);
    same(
        "relu_backward",
        &Tensor::relu_backward(&grad, &x).unwrap(),
        &Tensor::relu_backward(&up(&grad), &g).unwrap(),
    );
    // A strided input goes through the device gather first.
    same(
        "relu of t()",
        &x.t().unwrap().relu().unwrap(),
        &g.t().unwrap().relu().unwrap(),
    );
}

#[test]
fn sums_means_and_maxima_match_the_cpu_bit_for_bit() {
    if !gpu() {
        return;
    }
    // 2500 along dim 1 spans three REDUCE_BLOCKs, so the blocked order is exercised.
    let x = cpu_tensor(&[3, 2500, 5], 7);
    let g = up(&x);
    for dim in 0..3 {
        for keepdim in [false, true] {
            let what = format!("dim {dim} keepdim {keepdim}");
            same(
                &format!("sum {what}"),
                &x.sum_dim(dim, keepdim).unwrap(),
                &g.sum_dim(dim, keepdim).unwrap(),
            );
            same(
                &format!("mean {what}"),
                &x.mean_dim(dim, keepdim).unwrap(),
                &g.mean_dim(dim, keepdim).unwrap(),
            );
            same(
                &format!("max {what}"),
                &x.max_dim(dim, keepdim).unwrap(),
                &g.max_dim(dim, keepdim).unwrap(),
            );
        }
        same(
            &format!("argmax {dim}"),
            &x.argmax(dim).unwrap(),
            &g.argmax(dim).unwrap(),
        );
    }
    same("sum_all", &x.sum_all().unwrap(), &g.sum_all().unwrap());
    same("mean_all", &x.mean_all().unwrap(), &g.mean_all().unwrap());
    let t = x.narrow(1, 3, 1500).unwrap();
    same(
        "sum of a narrowed view",
        &t.sum_dim(1, false).unwrap(),
        &up(&x)
            .narrow(1, 3, 1500)
            .unwrap()
            .sum_dim(1, false)
            .unwrap(),
    );
    // Ties take the first maximum; NaN beats everything, the first NaN wins.
    let ties = Tensor::from_vec(
        vec![1f32, 3., 3., f32::NAN, 2., f32::NAN],
        &[1, 6],
        Device::Cpu,
    )
    .unwrap();
    same(
        "argmax ties/NaN",
        &ties.argmax(1).unwrap(),
        &up(&ties).argmax(1).unwrap(),
    );
    assert!(matches!(
        g.sum_dim(3, false),
        Err(TensorError::DimOutOfRange { .. })
    ));
}

#[test]
fn log_softmax_matches_the_cpu_closely() {
    if !gpu() {
        return;
    }
    let x = cpu_tensor(&[128, 10], 8).mul_scalar(5.0).unwrap();
    for dim in [0, 1] {
        close(
            "log_softmax",
            &x.log_softmax(dim).unwrap(),
            &up(&x).log_softmax(dim).unwrap(),
            2e-6,
            2e-6,
        );
    }
}

#[test]
fn matmul_matches_the_cpu_closely_for_every_layout() {
    if !gpu() {
        return;
    }
    let (a, b) = (cpu_tensor(&[33, 17], 10), cpu_tensor(&[17, 9], 11));
    let (ga, gb) = (up(&a), up(&b));
    close(
        "matmul",
        &a.matmul(&b).unwrap(),
        &ga.matmul(&gb).unwrap(),
        1e-5,
        1e-5,
    );
    // Transposed views, as Linear's backward uses them.
    let (at, bt) = (cpu_tensor(&[17, 33], 12), cpu_tensor(&[9, 17], 13));
    let cpu = at.t().unwrap().matmul(&bt.t().unwrap()).unwrap();
    let gpu = up(&at).t().unwrap().matmul(&up(&bt).t().unwrap()).unwrap();
    close("matmul of t() views", &cpu, &gpu, 1e-5, 1e-5);
    // A view that is neither row- nor column-major is gathered first.
    let wide = cpu_tensor(&[33, 34], 14);
    let strided = wide.narrow(1, 0, 17).unwrap();
    close(
        "matmul of a narrowed view",
        &strided.matmul(&b).unwrap(),
        &up(&wide).narrow(1, 0, 17).unwrap().matmul(&gb).unwrap(),
        1e-5,
        1e-5,
    );
    let f = a.to_dtype(DType::F64).unwrap();
    let fb = b.to_dtype(DType::F64).unwrap();
    close(
        "matmul f64",
        &f.matmul(&fb).unwrap(),
        &up(&f).matmul(&up(&fb)).unwrap(),
        1e-12,
        1e-12,
    );
    // Empty inner dimension: zeros, like the CPU.
    let e = Tensor::zeros(&[4, 0], DType::F32, GPU).unwrap();
    let z = e
        .matmul(&Tensor::zeros(&[0, 3], DType::F32, GPU).unwrap())
        .unwrap();
    assert_eq!(z.to_vec::<f32>().unwrap(), vec![0.0; 12]);
}

/// Each batch entry of `lhs x rhs` alone, in row-major batch order: `[1, .., 1, m, k]`
/// views read in place, so each is one plain gemm, the per-entry path batched products
/// took before they became strided-batched gemms.
fn entry_by_entry(lhs: &Tensor, rhs: &Tensor) -> Vec<u64> {
    let batch = &lhs.dims()[..lhs.rank() - 2];
    let mut bits = Vec::new();
    for b in 0..batch.iter().product() {
        let (mut l, mut r, mut rest) = (lhs.clone(), rhs.clone(), b);
        for d in (0..batch.len()).rev() {
            let i = rest % batch[d];
            rest /= batch[d];
            (l, r) = (l.narrow(d, i, 1).unwrap(), r.narrow(d, i, 1).unwrap());
        }
        bits.extend(bits_of(&l.matmul(&r).unwrap()));
    }
    bits
}

#[test]
fn batched_matmul_matches_the_cpu_and_each_entrys_own_gemm() {
    if !gpu() {
        return;
    }
    // Attention's operands: heads of [b, t, h, d] activations (transposed views whose
    // batch dims share no one stride), k^T, dense probabilities; and a dense 3-D batch.
    fn heads(x: &Tensor) -> Tensor {
        x.transpose(1, 2).unwrap()
    }
    type Operands = fn(&[Tensor]) -> (Tensor, Tensor);
    let cases: [(&str, Operands); 4] = [
        ("q k^T", |t| {
            (heads(&t[0]), heads(&t[1]).transpose(2, 3).unwrap())
        }),
        ("p v", |t| (t[3].clone(), heads(&t[2]))),
        ("p^T dy", |t| (t[3].transpose(2, 3).unwrap(), heads(&t[0]))),
        ("3-D", |t| (t[4].clone(), t[5].clone())),
    ];
    let (b, t, h, d) = (3, 9, 4, 5);
    for (dtype, tolerance) in [(DType::F32, 1e-4), (DType::F64, 1e-12)] {
        let act = [b, t, h, d];
        let dims: [&[usize]; 6] = [&act, &act, &act, &[b, h, t, t], &[6, 7, 8], &[6, 8, 5]];
        let cpu: Vec<Tensor> = (0..6)
            .map(|i| cpu_tensor(dims[i], 80 + i as u64).to_dtype(dtype).unwrap())
            .collect();
        let on_gpu: Vec<Tensor> = cpu.iter().map(up).collect();
        for (name, operands) in cases {
            let what = format!("batched matmul {name} {dtype:?}");
            let ((l, r), (gl, gr)) = (operands(&cpu), operands(&on_gpu));
            let batched = gl.matmul(&gr).unwrap();
            assert_eq!(batched.device(), GPU, "{what}: result not on the GPU");
            close(
                &what,
                &l.matmul(&r).unwrap(),
                &batched,
                tolerance,
                tolerance,
            );
            // The stand-in computes a strided batch entry by entry, each as the plain
            // gemm; cuBLAS does not promise that across its kernels, so a GPU is held
            // to the tolerance only.
            if on_standin() {
                let entries = entry_by_entry(&gl, &gr);
                assert_eq!(bits_of(&batched), entries, "{what}: entries' own gemms");
            }
        }
    }
}

#[test]
fn in_place_updates_match_the_cpu_and_respect_views() {
    if !gpu() {
        return;
    }
    let (s, x) = (cpu_tensor(&[16, 33], 20), cpu_tensor(&[16, 33], 21));
    let (mut cs, mut gs) = (s.clone(), up(&s));
    let shared = gs.clone();
    cs.axpy_(-0.05, &x).unwrap();
    gs.axpy_(-0.05, &up(&x)).unwrap();
    same("axpy_", &cs, &gs);
    same("copy-on-write leaves the clone alone", &s, &shared);
    cs.scale_(0.9).unwrap();
    gs.scale_(0.9).unwrap();
    same("scale_", &cs, &gs);
    // The fused SGD step: one kernel, the CPU loop's bits, on the parameter and its buffer.
    let hyper = SgdMomentumStep {
        lr: 0.05,
        momentum: 0.9,
        dampening: 0.1,
        weight_decay: 1e-3,
        nesterov: false,
    };
    let (mut cb, mut gb) = (x.clone(), up(&x));
    let grad = cpu_tensor(&[16, 33], 25);
    cs.sgd_momentum_step_(&mut cb, &grad, &hyper).unwrap();
    gs.sgd_momentum_step_(&mut gb, &up(&grad), &hyper).unwrap();
    same("sgd_momentum_step_ parameter", &cs, &gs);
    same("sgd_momentum_step_ buffer", &cb, &gb);
    let bias = cpu_tensor(&[33], 22);
    cs.add_(&bias).unwrap();
    gs.add_(&up(&bias)).unwrap();
    same("add_ broadcast", &cs, &gs);
    // Writing through a strided view changes only that view's elements.
    let base = cpu_tensor(&[8, 8], 23);
    let (mut cv, mut gv) = (
        base.t().unwrap().narrow(0, 2, 3).unwrap(),
        up(&base).t().unwrap().narrow(0, 2, 3).unwrap(),
    );
    let src = cpu_tensor(&[3, 8], 24);
    cv.axpy_(2.0, &src).unwrap();
    gv.axpy_(2.0, &up(&src)).unwrap();
    same("axpy_ into a view", &cv, &gv);
    let (mut cd, mut gd) = (
        Tensor::zeros(&[8, 8], DType::F32, Device::Cpu).unwrap(),
        Tensor::zeros(&[8, 8], DType::F32, GPU).unwrap(),
    );
    cd.copy_from_(&base.t().unwrap()).unwrap();
    gd.copy_from_(&up(&base).t().unwrap()).unwrap();
    same("copy_from_ a transposed view", &cd, &gd);
    same(
        "contiguous",
        &base.t().unwrap().contiguous().unwrap(),
        &up(&base).t().unwrap().contiguous().unwrap(),
    );
    same(
        "to_dtype",
        &base.to_dtype(DType::F64).unwrap(),
        &up(&base).to_dtype(DType::F64).unwrap(),
    );
    // Broadcasting and strided kernels index up to 8 dims; more is a typed error.
    let deep = Tensor::zeros(&[1; 9], DType::F32, GPU).unwrap();
    assert!(matches!(
        deep.add(&deep),
        Err(TensorError::InvalidArgument { .. })
    ));
}

#[test]
fn gather_and_one_hot_match_the_cpu_bit_for_bit() {
    if !gpu() {
        return;
    }
    for dtype in [DType::F32, DType::F64] {
        let x = cpu_tensor(&[6, 10], 60).to_dtype(dtype).unwrap();
        let views = [x.clone(), x.t().unwrap(), x.narrow(1, 3, 6).unwrap()];
        for (i, src) in views.iter().enumerate() {
            let (rows, cols) = (src.dims()[0], src.dims()[1]);
            let along_1: Vec<i64> = (0..rows * 2).map(|i| ((i * 5 + 1) % cols) as i64).collect();
            let along_0: Vec<i64> = (0..cols).map(|i| ((i * 3 + 2) % rows) as i64).collect();
            for (dim, index) in [
                (
                    1,
                    Tensor::from_vec(along_1, &[rows, 2], Device::Cpu).unwrap(),
                ),
                (
                    0,
                    Tensor::from_vec(along_0, &[1, cols], Device::Cpu).unwrap(),
                ),
            ] {
                same(
                    &format!("gather {dtype} view #{i} dim {dim}"),
                    &src.gather(dim, &index).unwrap(),
                    &up(src).gather(dim, &up(&index)).unwrap(),
                );
            }
        }
        let targets = Tensor::from_vec(vec![3i64, 0, 9, 9, 5, 1], &[6], Device::Cpu).unwrap();
        same(
            &format!("one_hot {dtype}"),
            &targets.one_hot(10, dtype).unwrap(),
            &up(&targets).one_hot(10, dtype).unwrap(),
        );
    }
    // The index must be on the source's device.
    let x = up(&cpu_tensor(&[2, 3], 61));
    let index = Tensor::from_vec(vec![0i64, 1], &[2, 1], Device::Cpu).unwrap();
    assert!(matches!(
        x.gather(1, &index),
        Err(TensorError::DeviceMismatch { .. })
    ));
}

#[test]
fn cat_and_index_select_match_the_cpu_bit_for_bit() {
    if !gpu() {
        return;
    }
    for dtype in [DType::F32, DType::F64, DType::I64, DType::BF16, DType::U8] {
        let x = cpu_tensor(&[4, 6, 5], 62).to_dtype(dtype).unwrap();
        let y = cpu_tensor(&[4, 6, 5], 63).to_dtype(dtype).unwrap();
        // Dense inputs, a transposed view and a narrowed one, along every dimension.
        for dim in 0..3 {
            let parts = [
                x.clone(),
                y.narrow(dim, 1, 2).unwrap(),
                x.transpose(0, 2).unwrap().transpose(0, 2).unwrap(),
            ];
            let on_gpu: Vec<Tensor> = parts.iter().map(up).collect();
            same(
                &format!("cat {dtype} dim {dim}"),
                &Tensor::cat(&parts, dim).unwrap(),
                &Tensor::cat(&on_gpu, dim).unwrap(),
            );
            let view = x.transpose(0, 1).unwrap();
            for (what, src) in [("dense", &x), ("view", &view)] {
                let size = src.dims()[dim];
                let picks: Vec<usize> = (0..7).map(|i| (i * 3 + 1) % size).collect();
                same(
                    &format!("index_select {dtype} {what} dim {dim}"),
                    &src.index_select(dim, &picks).unwrap(),
                    &up(src).index_select(dim, &picks).unwrap(),
                );
            }
        }
    }
    // Empty picks and an index out of range, as on the CPU.
    let x = up(&cpu_tensor(&[3, 2], 64));
    assert_eq!(x.index_select(0, &[]).unwrap().dims(), &[0, 2]);
    assert!(matches!(
        x.index_select(0, &[3]),
        Err(TensorError::IndexOutOfRange { .. })
    ));
}
