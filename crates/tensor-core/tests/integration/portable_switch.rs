//! The portable-arithmetic switch (docs/contract.md §14) through the Tensor API on the
//! CPU: with it on, `matmul` is the defined fma chain (also for transposed views and for
//! 1 and 2 threads), `exp` / `log` / `log_softmax` use ditto's own routines; with it off,
//! the default paths come back. The switch is process-wide, so it is flipped in one test
//! only, in a process of its own (`own_process!`).

use tensor_core::portable::math;
use tensor_core::{are_portable_arithmetic_enabled, use_portable_arithmetic, Device, Tensor};
use test_support::on_threads;

fn values(n: usize, salt: u32) -> Vec<f32> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(salt) >> 8) as f32 / 1_048_576.0 - 8.0)
        .collect()
}

/// `c[i, j] = fma chain over p ascending` for dense row-major `a (m x k)`, `b (k x n)`.
fn chain(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<u32> {
    let mut out = Vec::new();
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f32;
            for p in 0..k {
                acc = a[i * k + p].mul_add(b[p * n + j], acc);
            }
            out.push(acc.to_bits());
        }
    }
    out
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>()
        .unwrap()
        .into_iter()
        .map(f32::to_bits)
        .collect()
}

#[test]
fn the_switch_selects_the_portable_ops() {
    test_support::own_process!(the_switch_selects_the_portable_ops);
    assert!(!are_portable_arithmetic_enabled(), "off by default");
    let (m, k, n) = (37, 300, 45);
    let (a, b) = (values(m * k, 1), values(k * n, 2));
    let ta = Tensor::from_vec(a.clone(), &[m, k], Device::Cpu).unwrap();
    let tb = Tensor::from_vec(b.clone(), &[k, n], Device::Cpu).unwrap();
    let want = chain(&a, &b, m, k, n);
    let x = Tensor::from_vec(values(64 * 10, 3), &[64, 10], Device::Cpu).unwrap();
    let default_exp = bits(&x.exp().unwrap());

    use_portable_arithmetic(true);
    assert!(are_portable_arithmetic_enabled());
    for threads in [1, 2] {
        assert_eq!(
            on_threads(threads, || bits(&ta.matmul(&tb).unwrap())),
            want,
            "{threads} threads"
        );
    }
    // The same product through transposed views of transposed copies.
    let at = ta.t().unwrap().contiguous().unwrap().t().unwrap();
    let bt = tb.t().unwrap().contiguous().unwrap().t().unwrap();
    assert_eq!(bits(&at.matmul(&bt).unwrap()), want, "transposed views");
    let xs = x.to_vec::<f32>().unwrap();
    let want_exp: Vec<u32> = xs.iter().map(|&v| math::exp(v).to_bits()).collect();
    assert_eq!(bits(&x.exp().unwrap()), want_exp);
    let positive = x.abs_for_test();
    let want_log: Vec<u32> = positive
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|&v| math::log(v).to_bits())
        .collect();
    assert_eq!(bits(&positive.log().unwrap()), want_log);
    // log_softmax of a row: the portable steps of Tensor::log_softmax.
    let row = &xs[..10];
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let z: f64 = row.iter().map(|&v| f64::from(math::exp(v - m))).sum();
    let l = math::log_of_sum(z);
    let want_row: Vec<u32> = row.iter().map(|&v| ((v - m) - l).to_bits()).collect();
    assert_eq!(bits(&x.log_softmax(1).unwrap())[..10], want_row[..]);

    use_portable_arithmetic(false);
    assert_eq!(
        bits(&x.exp().unwrap()),
        default_exp,
        "the default exp is back"
    );
}

/// `|x| + 0.5`, through ops the switch does not touch.
trait AbsForTest {
    fn abs_for_test(&self) -> Tensor;
}

impl AbsForTest for Tensor {
    fn abs_for_test(&self) -> Tensor {
        let v: Vec<f32> = self
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|x| x.abs() + 0.5)
            .collect();
        Tensor::from_vec(v, self.dims(), Device::Cpu).unwrap()
    }
}
