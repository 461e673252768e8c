//! The CUDA paths of the ops with a nondeterministic fast path (`index_add`,
//! `scatter_add`, `sum_with` / `mean_with`) and the `Embedding` built on them:
//! deterministic paths bit-identical to the CPU's and to themselves over repeated runs;
//! fast (`atomicAdd`) paths within rounding of them; every mode of the switch, through
//! the ops, with each entry's `fast_runs` counter showing which path ran.
//!
//! Real tests whenever a GPU (or the CUDA stand-in, whose results are labelled as such)
//! is present; otherwise each prints why it skipped, and `REQUIRE_GPU=1` turns a skip
//! into a failure. The switch is process-wide, so the tests take turns.
use crate::support;

use std::sync::{Mutex, MutexGuard};

use ditto::nn_mini::{Embedding, Module};
use ditto::tensor_core::determinism::paths::{INDEX_ADD_CUDA, SCATTER_ADD_CUDA, SUM_CUDA};
use ditto::tensor_core::determinism::FastPath;
use ditto::tensor_core::{
    ops::SUM_FAST_MIN_LANE, use_deterministic_algorithms, Algorithm, CheckedIndex, DType,
    DeterministicMode, Device, Tensor, TensorError,
};
use support::{assert_same, cpu_tensor, gpu};

const GPU: Device = Device::Cuda(0);
/// Repeated runs of each deterministic path.
const RUNS: usize = 5;

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn up(t: &Tensor) -> Tensor {
    t.to_device(GPU).unwrap()
}

fn ids(n: usize, size: usize, salt: i64) -> Tensor {
    let v: Vec<i64> = (0..n as i64)
        .map(|k| (k * 7919 + salt) % size as i64)
        .collect();
    Tensor::from_vec(v, &[n], Device::Cpu).unwrap()
}

/// Within rounding of `want`: `tol` absolute, scaled by the magnitude.
fn close(what: &str, got: &Tensor, want: &Tensor, tol: f64) {
    let g = got.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    let w = want.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(
            (a - b).abs() <= tol * b.abs().max(1.0),
            "{what}: element {i}: {a} vs {b}"
        );
    }
}

/// Runs `f` and returns its result and how many times `entry` took its fast path.
fn counting<R>(entry: &FastPath, f: impl FnOnce() -> R) -> (R, u64) {
    let before = entry.fast_runs();
    let r = f();
    (r, entry.fast_runs() - before)
}

/// The cases: (dims of the target, dim, rows of the source).
const INDEX_ADD_CASES: [(&[usize], usize, usize); 3] = [
    (&[40, 32], 0, 5000),
    (&[3, 700, 4], 1, 3000),
    (&[6, 9], 1, 2500),
];

#[test]
fn deterministic_index_add_and_scatter_add_equal_the_cpu_on_every_run() {
    test_support::own_process!(deterministic_index_add_and_scatter_add_equal_the_cpu_on_every_run);
    if !gpu() {
        return;
    }
    let _turn = serial();
    for (salt, &(dims, dim, n)) in INDEX_ADD_CASES.iter().enumerate() {
        let dst = cpu_tensor(dims, salt as u64);
        let mut src_dims = dims.to_vec();
        src_dims[dim] = n;
        let src = cpu_tensor(&src_dims, 10 + salt as u64);
        let index = ids(n, dims[dim], salt as i64);
        let want = dst
            .index_add_with(dim, &index, &src, 0.75, Algorithm::Deterministic)
            .unwrap();
        let (d, i, s) = (up(&dst), up(&index), up(&src));
        for run in 0..RUNS {
            let got = d
                .index_add_with(dim, &i, &s, 0.75, Algorithm::Deterministic)
                .unwrap();
            assert_same(
                &format!("index_add {dims:?} dim {dim} run {run}"),
                &got.to_device(Device::Cpu).unwrap(),
                &want,
            );
        }
        // Indices checked on the host and placed with their sort (CheckedIndex): the
        // same sums, added into the tensor or into zeros the kernel never writes first.
        let values: Vec<usize> = index
            .to_vec::<i64>()
            .unwrap()
            .iter()
            .map(|&v| v as usize)
            .collect();
        let checked = CheckedIndex::new(values, dims[dim], GPU).unwrap();
        let got = d
            .index_add_checked(dim, &checked, &s, 0.75, Algorithm::Deterministic)
            .unwrap();
        assert_same(
            "index_add_checked",
            &got.to_device(Device::Cpu).unwrap(),
            &want,
        );
        let zeros = Tensor::zeros(dims, DType::F32, Device::Cpu).unwrap();
        let want_zeros = zeros
            .index_add_with(dim, &index, &src, 0.75, Algorithm::Deterministic)
            .unwrap();
        for algorithm in [Algorithm::Deterministic, Algorithm::Fast] {
            let got = Tensor::zeros_index_add_checked(dims, dim, &checked, &s, 0.75, algorithm)
                .unwrap()
                .to_device(Device::Cpu)
                .unwrap();
            match algorithm {
                Algorithm::Fast => close("zeros_index_add_checked, fast", &got, &want_zeros, 1e-3),
                _ => assert_same("zeros_index_add_checked", &got, &want_zeros),
            }
        }
        let fast = d
            .index_add_with(dim, &i, &s, 0.75, Algorithm::Fast)
            .unwrap();
        close(
            "fast index_add",
            &fast.to_device(Device::Cpu).unwrap(),
            &want,
            1e-3,
        );
    }
    // scatter_add along each dim of a 3-D target.
    let dst = cpu_tensor(&[30, 20, 10], 3);
    for dim in 0..3 {
        let src = cpu_tensor(&[30, 20, 10], 4 + dim as u64);
        let size = [30i64, 20, 10][dim];
        let v: Vec<i64> = (0..6000i64).map(|k| (k * 31 + 7) % size).collect();
        let index = Tensor::from_vec(v, &[30, 20, 10], Device::Cpu).unwrap();
        let want = dst
            .scatter_add_with(dim, &index, &src, Algorithm::Deterministic)
            .unwrap();
        let (d, i, s) = (up(&dst), up(&index), up(&src));
        for run in 0..RUNS {
            let got = d
                .scatter_add_with(dim, &i, &s, Algorithm::Deterministic)
                .unwrap();
            assert_same(
                &format!("scatter_add dim {dim} run {run}"),
                &got.to_device(Device::Cpu).unwrap(),
                &want,
            );
        }
        let fast = d.scatter_add_with(dim, &i, &s, Algorithm::Fast).unwrap();
        close(
            "fast scatter_add",
            &fast.to_device(Device::Cpu).unwrap(),
            &want,
            1e-4,
        );
    }
}

#[test]
fn fixed_order_sums_equal_the_cpu_and_the_atomic_sum_is_close() {
    test_support::own_process!(fixed_order_sums_equal_the_cpu_and_the_atomic_sum_is_close);
    if !gpu() {
        return;
    }
    let _turn = serial();
    for dims in [&[3usize, 70_000][..], &[200_000][..], &[4, 1000, 3][..]] {
        let x = cpu_tensor(dims, 5);
        let g = up(&x);
        for dim in [None, Some(dims.len() - 1), Some(0)] {
            for mean in [false, true] {
                let op = |t: &Tensor, a| {
                    if mean {
                        t.mean_with(dim, false, a)
                    } else {
                        t.sum_with(dim, false, a)
                    }
                };
                let want = op(&x, Algorithm::Deterministic).unwrap();
                for run in 0..RUNS {
                    let got = op(&g, Algorithm::Deterministic).unwrap();
                    let what = format!("{dims:?} dim {dim:?} mean {mean} run {run}");
                    assert_same(&what, &got.to_device(Device::Cpu).unwrap(), &want);
                }
                let fast = op(&g, Algorithm::Fast).unwrap();
                close(
                    "atomic sum",
                    &fast.to_device(Device::Cpu).unwrap(),
                    &want,
                    1e-5,
                );
            }
        }
    }
}

#[test]
fn embedding_on_the_gpu_equals_the_cpu() {
    test_support::own_process!(embedding_on_the_gpu_equals_the_cpu);
    if !gpu() {
        return;
    }
    let _turn = serial();
    let (rows, dim, n) = (50, 16, 4000);
    let weight = cpu_tensor(&[rows, dim], 8);
    let tokens = ids(n, rows, 3).reshape(&[40, 100]).unwrap();
    let grad = cpu_tensor(&[40, 100, dim], 9);
    // The table on `device`, the ids on `ids_on` (a GPT hands its embedding host ids).
    let run = |device: Device, ids_on: Device| {
        let mut layer = Embedding::from_weight(weight.to_device(device).unwrap())
            .unwrap()
            .with_algorithm(Algorithm::Deterministic);
        let out = layer
            .forward(&tokens.to_device(ids_on).unwrap(), true)
            .unwrap();
        layer
            .backward_params(&grad.to_device(device).unwrap())
            .unwrap();
        let g = layer.weight().grad.clone().unwrap();
        (
            out.to_device(Device::Cpu).unwrap(),
            g.to_device(Device::Cpu).unwrap(),
        )
    };
    let (out, g) = run(Device::Cpu, Device::Cpu);
    for run_number in 0..RUNS {
        let ids_on = if run_number % 2 == 0 {
            GPU
        } else {
            Device::Cpu
        };
        let (gpu_out, gpu_g) = run(GPU, ids_on);
        assert_same("embedding forward", &gpu_out, &out);
        assert_same("embedding weight gradient", &gpu_g, &g);
    }
}

#[test]
fn every_mode_of_every_cuda_op() {
    test_support::own_process!(every_mode_of_every_cuda_op);
    if !gpu() {
        return;
    }
    let _turn = serial();
    use Algorithm::{Auto, Deterministic, Fast};
    let dst = up(&cpu_tensor(&[40, 8], 1));
    let src = up(&cpu_tensor(&[900, 8], 2));
    let index = up(&ids(900, 40, 0));
    let scatter_index = up(&ids(900 * 8, 40, 1).reshape(&[900, 8]).unwrap());
    let long = up(&cpu_tensor(&[2, 70_000], 3));
    type Op<'a> = Box<dyn Fn(Algorithm) -> Result<Tensor, TensorError> + 'a>;
    let ops: [(&FastPath, &str, Op); 3] = [
        (
            &INDEX_ADD_CUDA,
            "index_add",
            Box::new(|a| dst.index_add_with(0, &index, &src, 1.0, a)),
        ),
        (
            &SCATTER_ADD_CUDA,
            "scatter_add",
            Box::new(|a| dst.scatter_add_with(0, &scatter_index, &src, a)),
        ),
        (
            &SUM_CUDA,
            "sum",
            Box::new(|a| long.sum_with(Some(1), false, a)),
        ),
    ];
    for mode in [
        DeterministicMode::Off,
        DeterministicMode::Warn,
        DeterministicMode::Error,
    ] {
        use_deterministic_algorithms(mode);
        for (entry, name, op) in &ops {
            let want = op(Deterministic).unwrap().to_device(Device::Cpu).unwrap();
            let (r, fast) = counting(entry, || op(Deterministic));
            assert_eq!(fast, 0, "{name} {mode:?} Deterministic");
            assert_same(name, &r.unwrap().to_device(Device::Cpu).unwrap(), &want);
            // Auto: the fast path in Off mode where it pays, else deterministic. The
            // index ops' cases pay; the sum's 70,000-element lanes are below
            // SUM_FAST_MIN_LANE (2^26, where the H100 measured the atomic sum faster).
            let (r, fast) = counting(entry, || op(Auto));
            let off = mode == DeterministicMode::Off;
            let pays = *name != "sum" || 70_000 >= SUM_FAST_MIN_LANE;
            assert_eq!(fast, u64::from(off && pays), "{name} {mode:?} Auto");
            if !(off && pays) {
                assert_same(name, &r.unwrap().to_device(Device::Cpu).unwrap(), &want);
            }
            let (r, fast) = counting(entry, || op(Fast));
            if mode == DeterministicMode::Error {
                assert_eq!(fast, 0);
                assert_eq!(
                    r.unwrap_err(),
                    TensorError::NondeterministicOp {
                        op: entry.op,
                        device: GPU,
                        alternative: entry.alternative
                    },
                    "{name}"
                );
            } else {
                assert_eq!(fast, 1, "{name} {mode:?} Fast");
                close(
                    name,
                    &r.unwrap().to_device(Device::Cpu).unwrap(),
                    &want,
                    1e-3,
                );
            }
        }
    }
    use_deterministic_algorithms(DeterministicMode::Off);
}

#[test]
fn a_cpu_trace_lines_up_with_a_cuda_trace() {
    test_support::own_process!(a_cpu_trace_lines_up_with_a_cuda_trace);
    use ditto::nn_mini::train::{Run, TrainConfig, Trainer};
    use ditto::tensor_core::audit::{self, diff};
    if !gpu() {
        return;
    }
    let _turn = serial();
    let dir = std::env::temp_dir().join(format!("ditto-cpu-cuda-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = |device: Device| {
        let path = dir.join(format!("{device}.trace"));
        let config = TrainConfig {
            batch_size: 16,
            dataset_size: 64,
            layers: vec![8, 16, 4],
            device,
            ..TrainConfig::default()
        };
        audit::start(&path).unwrap();
        audit::stream(
            || "main".into(),
            || {
                let mut trainer = Trainer::new(config).unwrap();
                for _ in 0..3 {
                    trainer.step().unwrap();
                }
            },
        );
        audit::stop().unwrap();
        diff::Trace::read(&path).unwrap()
    };
    let (cpu, cuda) = (trace(Device::Cpu), trace(GPU));
    let report = diff::diff(&cpu, &cuda);
    std::fs::remove_dir_all(&dir).unwrap();
    // The same ops at the same call sites: the only possible finding is an op whose
    // backends round differently (cuBLAS, libdevice), never a different path.
    assert!(report.compared > 0, "{report}");
    for finding in &report.findings {
        assert_eq!(finding.kind, diff::Divergence::Output, "{report}");
        let op = &finding.a.as_ref().unwrap().op;
        assert!(
            ["matmul", "exp", "log", "log_softmax"].contains(&op.as_str()),
            "{report}"
        );
    }
    println!("CPU vs {GPU}: {report}");
}
