//! Portable arithmetic (docs/contract.md §14) on CUDA against the CPU: `matmul` (the
//! tiled kernel against the CPU's SIMD kernels, every layout the backward passes use and
//! sizes around the tiles), `exp`, `log` and `log_softmax` must be bit-identical. And the
//! check can fail: without portable arithmetic, cuBLAS and libdevice (the stand-in
//! imitates their rounding) differ from the CPU's gemm and libm in the last bits.
//!
//! The switch is process-wide, so it is flipped in one test only, in a process of
//! its own (`own_process!`).
use crate::support;

use ditto::tensor_core::{use_portable_arithmetic, Device, Tensor};
use support::{assert_same, cpu_tensor, gpu, on_standin};

/// `f` on the CPU and on `cuda:0` (inputs moved there first).
fn both(inputs: &[&Tensor], f: impl Fn(&[Tensor]) -> Tensor) -> (Tensor, Tensor) {
    let cpu: Vec<Tensor> = inputs.iter().map(|t| (*t).clone()).collect();
    let gpu: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.to_device(Device::Cuda(0)).unwrap())
        .collect();
    (f(&cpu), f(&gpu).to_device(Device::Cpu).unwrap())
}

/// Sizes around the 64 x 64 tiles and 16-deep slices of the CUDA kernel and the CPU
/// kernels' 12 x 32 / 6 x 16 tiles and 256-deep blocks, and the demo's shapes.
const SHAPES: [(usize, usize, usize); 8] = [
    (1, 1, 1),
    (3, 17, 5),
    (64, 16, 64),
    (65, 33, 63),
    (130, 257, 70),
    (64, 784, 128),
    (64, 128, 10),
    (10, 64, 128),
];

fn matmuls_and_softmax_agree() {
    for (case, &(m, k, n)) in SHAPES.iter().enumerate() {
        let salt = 10 * case as u64;
        let (a, b) = (cpu_tensor(&[m, k], salt), cpu_tensor(&[k, n], salt + 1));
        let (cpu, cuda) = both(&[&a, &b], |t| t[0].matmul(&t[1]).unwrap());
        assert_same(&format!("matmul {m}x{k}x{n}"), &cuda, &cpu);
        // The backward passes' layouts: x * w^T and grad^T * x, as transposed views.
        let (at, bt) = (cpu_tensor(&[k, m], salt + 2), cpu_tensor(&[n, k], salt + 3));
        let (cpu, cuda) = both(&[&at, &bt], |t| {
            t[0].t().unwrap().matmul(&t[1].t().unwrap()).unwrap()
        });
        assert_same(&format!("matmul^T {m}x{k}x{n}"), &cuda, &cpu);
    }
    let logits = cpu_tensor(&[64, 10], 99).mul_scalar(8.0).unwrap();
    let (cpu, cuda) = both(&[&logits], |t| t[0].log_softmax(1).unwrap());
    assert_same("log_softmax", &cuda, &cpu);
    let (cpu, cuda) = both(&[&logits], |t| t[0].exp().unwrap());
    assert_same("exp", &cuda, &cpu);
    let positive = logits.exp().unwrap();
    let (cpu, cuda) = both(&[&positive], |t| t[0].log().unwrap());
    assert_same("log", &cuda, &cpu);
}

/// How many elements of `f`'s result differ between the CPU and `cuda:0`.
fn differing(inputs: &[&Tensor], f: impl Fn(&[Tensor]) -> Tensor) -> usize {
    let (cpu, cuda) = both(inputs, f);
    let (c, g) = (cpu.to_vec::<f32>().unwrap(), cuda.to_vec::<f32>().unwrap());
    c.iter()
        .zip(&g)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count()
}

#[test]
fn portable_arithmetic_is_bit_identical_on_cuda_and_the_default_is_not() {
    test_support::own_process!(portable_arithmetic_is_bit_identical_on_cuda_and_the_default_is_not);
    if !gpu() {
        return;
    }
    use_portable_arithmetic(true);
    matmuls_and_softmax_agree();
    use_portable_arithmetic(false);
    // The default paths: cuBLAS and libdevice. On the stand-in they round as a GPU does
    // (split-k sums, another exp / log), so some bits must differ from the CPU's, or the
    // check above could not fail. A real GPU is only reported.
    let (a, b) = (cpu_tensor(&[64, 784], 1), cpu_tensor(&[784, 128], 2));
    let matmul = differing(&[&a, &b], |t| t[0].matmul(&t[1]).unwrap());
    let x = cpu_tensor(&[4096], 3).mul_scalar(20.0).unwrap();
    let exp = differing(&[&x], |t| t[0].exp().unwrap());
    let log = differing(&[&x.exp().unwrap()], |t| t[0].log().unwrap());
    println!("default paths differing from the CPU: matmul {matmul} of 8192, exp {exp} / log {log} of 4096");
    if on_standin() {
        assert!(
            matmul > 0 && exp > 0 && log > 0,
            "the stand-in rounds like the CPU"
        );
    }
}
