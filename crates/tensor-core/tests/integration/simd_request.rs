//! `DITTO_SIMD` narrows the portable matmul's kernel (and never widens it), and the
//! narrowed kernel gives the bits of the widest one. The variable is read once per
//! process, so the test sets it in a process of its own (`own_process!`) before
//! anything reads it.

use tensor_core::portable::matmul::{matmul, matmul_with, Operand, SimdLevel};
use tensor_core::{simd_request, SimdRequest};

#[test]
fn ditto_simd_avx2_narrows_the_portable_matmul() {
    test_support::own_process!(ditto_simd_avx2_narrows_the_portable_matmul);
    // SAFETY: this child process runs this one test on one thread, and nothing has read
    // or written the environment yet.
    unsafe { std::env::set_var("DITTO_SIMD", "avx2") };
    assert_eq!(simd_request(), SimdRequest::Avx2);
    let want = if SimdLevel::Avx2Fma.is_available() {
        SimdLevel::Avx2Fma
    } else {
        SimdLevel::Scalar
    };
    assert_eq!(SimdLevel::chosen(), want);

    let (m, k, n) = (37, 300, 45);
    let (a, b) = (
        test_support::spread_f32(m * k, 1),
        test_support::spread_f32(k * n, 2),
    );
    let got = matmul(Operand::row_major(&a, m, k), Operand::row_major(&b, k, n)).unwrap();
    let widest = matmul_with(
        Operand::row_major(&a, m, k),
        Operand::row_major(&b, k, n),
        SimdLevel::detected(),
    )
    .unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&widest));
}
