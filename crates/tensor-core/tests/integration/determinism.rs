//! No op result may depend on the number of CPU threads: run each op in rayon pools of
//! 1, 2 and 5 threads on inputs large enough to take the parallel paths, and compare bits.

use tensor_core::{Device, Tensor};
use test_support::on_threads;

/// A deterministic pseudo-random f32 tensor with values in [-4, 4).
fn noise(dims: &[usize], salt: u64) -> Tensor {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n as u64)
        .map(|i| {
            let x = (i ^ salt)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(17);
            (x >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0
        })
        .collect();
    Tensor::from_vec(v, dims, Device::Cpu).unwrap()
}

/// Every op under test, its outputs as raw bits.
fn run_all() -> Vec<Vec<u32>> {
    let a = noise(&[300, 257], 1);
    let b = noise(&[257, 129], 2);
    let row = noise(&[257], 3);
    let bits = |t: Tensor| -> Vec<u32> {
        t.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    };
    let mut w = a.clone();
    w.axpy_(-0.01, &a.exp().unwrap()).unwrap();
    vec![
        bits(a.matmul(&b).unwrap()),
        bits(a.t().unwrap().matmul(&a).unwrap()),
        bits(a.add(&row).unwrap()),
        bits(a.mul(&a).unwrap()),
        bits(a.relu().unwrap()),
        bits(a.exp().unwrap()),
        bits(a.affine(0.3, -0.1).unwrap()),
        bits(a.sum_dim(0, false).unwrap()),
        bits(a.sum_dim(1, true).unwrap()),
        bits(a.mean_dim(0, false).unwrap()),
        bits(a.sum_all().unwrap()),
        bits(a.max_dim(1, false).unwrap()),
        bits(a.log_softmax(1).unwrap()),
        bits(a.log_softmax(0).unwrap()),
        bits(w),
        a.argmax(1)
            .unwrap()
            .to_vec::<i64>()
            .unwrap()
            .iter()
            .map(|&i| i as u32)
            .collect(),
    ]
}

#[test]
fn results_do_not_depend_on_thread_count() {
    let in_pool = |threads: usize| on_threads(threads, run_all);
    let one = in_pool(1);
    for threads in [2, 5] {
        let many = in_pool(threads);
        for (i, (x, y)) in one.iter().zip(&many).enumerate() {
            assert!(x == y, "op #{i} differs between 1 and {threads} threads");
        }
    }
}
