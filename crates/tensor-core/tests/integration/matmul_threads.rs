//! The CPU matmul gives the same bits in rayon pools of 1, 2, 3 and 8 threads, with the
//! default arithmetic (gemm on blocks of the output fixed by the sizes,
//! `ops/matmul/gemm_blocks.rs`) and with portable arithmetic (ditto's own kernels), at ragged
//! shapes, the demo MLP's and the large MLP's products, contiguous and through
//! transposed views. The portable switch is process-wide, so this binary flips it in one
//! test only.

use std::error::Error;

use tensor_core::{use_portable_arithmetic, Device, Tensor};

/// `(m, k, n, lhs transposed)`: ragged sizes around gemm's and the portable kernels'
/// tiles, the demo's (batch 128, 64-256-256-10) forward products and its weight
/// gradient `grad^T x` through a transposed view, and the large MLP's first layer
/// (batch 256, 784 -> 1024) forward and weight gradient.
const SHAPES: [(usize, usize, usize, bool); 10] = [
    (1, 1, 1, false),
    (7, 13, 5, false),
    (129, 257, 65, false),
    (129, 257, 65, true),
    (128, 64, 256, false),
    (128, 256, 256, false),
    (128, 256, 10, false),
    (256, 128, 256, true),
    (256, 784, 1024, false),
    (1024, 256, 784, true),
];

const THREADS: [usize; 4] = [1, 2, 3, 8];

/// The shared order-sensitive inputs ([`test_support::spread_f32`]).
fn values(n: usize, salt: u64) -> Vec<f32> {
    test_support::spread_f32(n, salt)
}

/// The `m x k` left operand: a dense tensor, or the transpose of a dense `k x m` one.
fn lhs(m: usize, k: usize, transposed: bool) -> Result<Tensor, Box<dyn Error>> {
    let data = values(m * k, (m * 31 + k) as u64);
    Ok(if transposed {
        Tensor::from_vec(data, &[k, m], Device::Cpu)?.t()?
    } else {
        Tensor::from_vec(data, &[m, k], Device::Cpu)?
    })
}

fn bits(t: &Tensor) -> Result<Vec<u32>, Box<dyn Error>> {
    Ok(t.to_vec::<f32>()?.into_iter().map(f32::to_bits).collect())
}

/// Every shape's product in pools of 1, 2, 3 and 8 threads, bit for bit, with the
/// current arithmetic; also a batched product (each entry is the 2-D product, with the
/// entries fanned out as well).
fn products_agree_across_pools(mode: &str) -> Result<(), Box<dyn Error>> {
    let pools = THREADS
        .iter()
        .map(|&n| rayon::ThreadPoolBuilder::new().num_threads(n).build())
        .collect::<Result<Vec<_>, _>>()?;
    for (m, k, n, transposed) in SHAPES {
        let a = lhs(m, k, transposed)?;
        let b = Tensor::from_vec(values(k * n, (k * 17 + n) as u64), &[k, n], Device::Cpu)?;
        let one = bits(&pools[0].install(|| a.matmul(&b))?)?;
        for (threads, pool) in THREADS.iter().zip(&pools).skip(1) {
            let got = bits(&pool.install(|| a.matmul(&b))?)?;
            let differing = one.iter().zip(&got).filter(|(x, y)| x != y).count();
            assert_eq!(
                differing,
                0,
                "{mode}: {m}x{k}x{n} (lhs transposed: {transposed}) differs in {differing} of {} \
                 elements between 1 and {threads} threads",
                one.len()
            );
        }
    }
    let a = Tensor::from_vec(values(3 * 129 * 257, 5), &[3, 129, 257], Device::Cpu)?;
    let b = Tensor::from_vec(values(3 * 257 * 65, 6), &[3, 257, 65], Device::Cpu)?;
    let one = bits(&pools[0].install(|| a.matmul(&b))?)?;
    for (threads, pool) in THREADS.iter().zip(&pools).skip(1) {
        let got = bits(&pool.install(|| a.matmul(&b))?)?;
        assert!(
            one == got,
            "{mode}: batched 3x129x257x65, 1 vs {threads} threads"
        );
    }
    Ok(())
}

#[test]
fn matmul_bits_do_not_depend_on_the_thread_count() -> Result<(), Box<dyn Error>> {
    test_support::own_process!(matmul_bits_do_not_depend_on_the_thread_count);
    use_portable_arithmetic(false);
    products_agree_across_pools("default")?;
    use_portable_arithmetic(true);
    let portable = products_agree_across_pools("portable");
    use_portable_arithmetic(false);
    portable
}
