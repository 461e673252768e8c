//! Every SIMD level and thread count against the definition: one `mul_add` chain per
//! element over `k` ascending from `+0.0`, compared bit for bit.

use super::{matmul_with, Operand, SimdLevel, KC};
use test_support::on_threads;

/// The definition, element by element.
fn chain<T: super::PortableElement>(a: &Operand<'_, T>, b: &Operand<'_, T>) -> Vec<T> {
    let mut out = Vec::with_capacity(a.rows * b.cols);
    for i in 0..a.rows {
        for j in 0..b.cols {
            let mut acc = T::default();
            for p in 0..a.cols {
                acc = a.at(i, p).mul_add(b.at(p, j), acc);
            }
            out.push(acc);
        }
    }
    out
}

/// The shared order-sensitive inputs ([`test_support::spread_f32`]).
fn values(n: usize, seed: u64) -> Vec<f32> {
    test_support::spread_f32(n, seed)
}

/// The `rows x cols` view of `data` from `offset` with these row and column strides.
fn view<T>(
    data: &[T],
    offset: usize,
    (rows, cols): (usize, usize),
    (row_stride, col_stride): (usize, usize),
) -> Operand<'_, T> {
    Operand {
        data,
        offset,
        rows,
        cols,
        row_stride,
        col_stride,
    }
}

/// The transpose of a dense `cols x rows` buffer, read as `rows x cols`.
fn transposed(data: &[f32], rows: usize, cols: usize) -> Operand<'_, f32> {
    view(data, 0, (rows, cols), (1, rows))
}

fn levels() -> Vec<SimdLevel> {
    [SimdLevel::Scalar, SimdLevel::Avx2Fma, SimdLevel::Avx512]
        .into_iter()
        .filter(|l| l.is_available())
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Every kernel level's product of `a` and `b` equals the scalar chain, bit for bit.
fn assert_every_level_equals_the_chain(a: Operand<'_, f32>, b: Operand<'_, f32>) {
    let want = bits(&chain(&a, &b));
    for level in levels() {
        let got = matmul_with(a, b, level).unwrap();
        let (m, k, n) = (a.rows, a.cols, b.cols);
        assert_eq!(bits(&got), want, "{level:?} at {m} x {k} x {n}");
    }
}

/// `(m, k, n)`: edge sizes around every kernel's MR / NR and around the k-block, odd
/// ones (7x13x5, 129x257x65: one past a power of two in every dimension), and the demo
/// MLP's products (batch 128, 64-256-256-10: each layer forward, and the first layer's
/// input gradient 128x256x64).
const SHAPES: [(usize, usize, usize); 20] = [
    (1, 1, 1),
    (7, 13, 5),
    (129, 257, 65),
    (128, 64, 256),
    (128, 256, 256),
    (128, 256, 10),
    (128, 256, 64),
    (12, 3, 32),
    (25, 9, 64),
    (1, 7, 1),
    (3, 5, 2),
    (6, 16, 16),
    (7, 17, 33),
    (8, 32, 31),
    (9, KC, 65),
    (13, KC + 1, 17),
    (97, 2 * KC + 3, 40),
    (64, 784, 128),
    (128, 64, 257),
    (0, 5, 3),
];

#[test]
fn every_level_equals_the_definition_bit_for_bit() {
    for (case, &(m, k, n)) in SHAPES.iter().enumerate() {
        let (a, b) = (values(m * k, case as u64), values(k * n, 100 + case as u64));
        assert_every_level_equals_the_chain(
            Operand::row_major(&a, m, k),
            Operand::row_major(&b, k, n),
        );
    }
}

#[test]
fn transposed_and_offset_views_equal_the_definition() {
    for &(m, k, n) in &SHAPES[..16] {
        let (a_t, b_t) = (values(m * k, 7), values(k * n, 8));
        // A stored as k x m (read transposed), B as n x k, with offsets into bigger buffers.
        let a = transposed(&a_t, m, k);
        let mut padded = vec![f32::NAN; 3];
        padded.extend_from_slice(&b_t);
        let b = view(&padded, 3, (k, n), (1, k));
        assert_every_level_equals_the_chain(a, b);
    }
}

/// Views with no unit stride (every other column and every third row of bigger
/// buffers), which packing reads element by element: both operands, at every level.
#[test]
fn views_without_a_unit_stride_equal_the_definition() {
    for &(m, k, n) in &SHAPES[..19] {
        let (a_big, b_big) = (values(3 * m * 2 * k + 1, 9), values(3 * k * 2 * n + 1, 10));
        let a = view(&a_big, 1, (m, k), (3 * 2 * k, 2));
        let b = view(&b_big, 1, (k, n), (3 * 2 * n, 2));
        assert_every_level_equals_the_chain(a, b);
    }
}

/// Large enough that the tiles and the packing of A and B fan out (above `PAR_MIN_WORK`
/// and `PACK_PAR_MIN` at every level), with row-major and transposed operands (each
/// packs along its own path).
#[test]
fn one_and_two_threads_give_the_same_bits() {
    let (m, k, n) = (520, 600, 530);
    assert!(m * n * KC >= super::PAR_MIN_WORK && m.min(n) * KC >= super::PACK_PAR_MIN);
    let (a_data, b_data) = (values(m * k, 1), values(k * n, 2));
    let layouts = [
        (
            Operand::row_major(&a_data, m, k),
            Operand::row_major(&b_data, k, n),
        ),
        (transposed(&a_data, m, k), transposed(&b_data, k, n)),
    ];
    for (a, b) in layouts {
        let want = bits(&chain(&a, &b));
        for level in levels() {
            let run = |threads| on_threads(threads, || matmul_with(a, b, level).unwrap());
            assert_eq!(bits(&run(1)), want, "{level:?}, 1 thread");
            assert_eq!(bits(&run(2)), want, "{level:?}, 2 threads");
        }
    }
}

#[test]
fn f64_and_special_values_follow_the_chain() {
    let a = [1e300f64, -1e300, 3.0, f64::INFINITY];
    let b = [1e10f64, 1e10, 0.5, 0.0];
    let (ao, bo) = (
        view(&a[..], 0, (1, 4), (4, 1)),
        view(&b[..], 0, (4, 1), (1, 1)),
    );
    // inf * 0 makes the chain NaN, as the definition says.
    assert!(matmul_with(ao, bo, SimdLevel::Scalar).unwrap()[0].is_nan());
    let b = [1.0f32, 1.0];
    let a = [f32::MAX, f32::MAX];
    let got = matmul_with(
        Operand::row_major(&a, 1, 2),
        Operand::row_major(&b, 2, 1),
        SimdLevel::detected(),
    )
    .unwrap();
    assert_eq!(got, vec![f32::INFINITY]);
}

#[test]
fn bad_views_and_shapes_are_errors() {
    let a = values(6, 1);
    let too_far = view(&a, 1, (2, 3), (3, 1));
    assert!(matmul_with(too_far, Operand::row_major(&a, 3, 2), SimdLevel::Scalar).is_err());
    assert!(matmul_with(
        Operand::row_major(&a, 2, 3),
        Operand::row_major(&a, 2, 3),
        SimdLevel::Scalar
    )
    .is_err());
    let empty = matmul_with(
        Operand::row_major(&a, 2, 0),
        Operand::row_major(&[], 0, 3),
        SimdLevel::Scalar,
    )
    .unwrap();
    assert_eq!(empty, vec![0.0; 6]);
}
