//! `index_add` and `scatter_add` on the CPU: PyTorch's semantics against plain reference
//! loops in the documented order, typed errors, and the deterministic paths' bits for 1,
//! 2 and 5 threads.
//!
//! The switch stays `Off` here (it is process-wide); `determinism_modes.rs` tests modes.

use crate::support;

use tensor_core::ops::INDEX_ADD_GROUP;
use tensor_core::{Algorithm, DType, Device, Tensor, TensorError};

use support::mixed;
use test_support::on_threads;

fn cpu(values: Vec<f32>, dims: &[usize]) -> Tensor {
    Tensor::from_vec(values, dims, Device::Cpu).unwrap()
}

fn index(values: &[i64]) -> Tensor {
    Tensor::from_slice(values, &[values.len()], Device::Cpu).unwrap()
}

fn indices(n: usize, size: usize, salt: u64) -> Vec<i64> {
    (0..n as u64)
        .map(|i| ((i ^ salt).wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as i64 % size as i64)
        .collect()
}

fn bits(t: &Tensor) -> Vec<u32> {
    bits_of(&t.to_vec::<f32>().unwrap())
}

fn bits_of(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `out[o, index[k], j] += alpha * src[o, k, j]` in the documented grouped order (groups
/// of `INDEX_ADD_GROUP` positions summed from +0.0, group sums added in order): the
/// reference, written as plainly as possible.
fn grouped_index_add(
    dst: &[f32],
    dims: &[usize],
    dim: usize,
    index: &[i64],
    src: &[f32],
    alpha: f32,
) -> Vec<f32> {
    let outer: usize = dims[..dim].iter().product();
    let inner: usize = dims[dim + 1..].iter().product();
    let (size, n) = (dims[dim], index.len());
    let mut out = dst.to_vec();
    for start in (0..n).step_by(INDEX_ADD_GROUP) {
        let mut sums = vec![0f32; dst.len()];
        let mut touched = vec![false; dst.len()];
        for o in 0..outer {
            for k in start..(start + INDEX_ADD_GROUP).min(n) {
                for j in 0..inner {
                    let t = (o * size + index[k] as usize) * inner + j;
                    sums[t] += alpha * src[(o * n + k) * inner + j];
                    touched[t] = true;
                }
            }
        }
        for t in 0..out.len() {
            if touched[t] {
                out[t] += sums[t];
            }
        }
    }
    out
}

#[test]
fn index_add_follows_the_grouped_order_along_every_dim() {
    let dims = [3, 5, 4];
    for (dim, n) in [(0, 7), (1, 2500), (2, 1025)] {
        let mut src_dims = dims.to_vec();
        src_dims[dim] = n;
        let dst = mixed(60, 1);
        let src = mixed(src_dims.iter().product(), 2);
        let idx = indices(n, dims[dim], 3);
        let want = grouped_index_add(&dst, &dims, dim, &idx, &src, 0.5);
        for algorithm in [Algorithm::Auto, Algorithm::Deterministic, Algorithm::Fast] {
            let got = cpu(dst.clone(), &dims)
                .index_add_with(
                    dim,
                    &index(&idx),
                    &cpu(src.clone(), &src_dims),
                    0.5,
                    algorithm,
                )
                .unwrap();
            assert_eq!(got.dims(), dims);
            // On one thread (small inputs) the fast path adds in index order, without
            // the grouping; Auto takes the deterministic path here.
            if algorithm == Algorithm::Fast {
                continue;
            }
            assert_eq!(bits(&got), bits_of(&want), "dim {dim} {algorithm:?}");
        }
        let mut in_place = cpu(dst.clone(), &dims);
        in_place
            .index_add_(dim, &index(&idx), &cpu(src.clone(), &src_dims), 0.5)
            .unwrap();
        assert_eq!(bits(&in_place), bits_of(&want));
    }
    // A strided self and source, f64, an empty index.
    let base = Tensor::from_vec(
        (0..12).map(f64::from).collect::<Vec<_>>(),
        &[3, 4],
        Device::Cpu,
    )
    .unwrap();
    let view = base.t().unwrap(); // [4, 3]
    let src = Tensor::ones(&[3, 2], DType::F64, Device::Cpu)
        .unwrap()
        .t()
        .unwrap(); // [2, 3]
    let got = view.index_add(0, &index(&[3, 3]), &src, 2.0).unwrap();
    let mut want = view.to_vec::<f64>().unwrap();
    for j in 0..3 {
        want[9 + j] += 4.0;
    }
    assert_eq!(got.to_vec::<f64>().unwrap(), want);
    let empty = cpu(vec![], &[0, 4]);
    assert_eq!(
        cpu(mixed(8, 4), &[2, 4])
            .index_add(0, &index(&[]), &empty, 1.0)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        mixed(8, 4)
    );
}

#[test]
fn index_add_rejects_bad_arguments_with_typed_errors() {
    let t = cpu(mixed(8, 1), &[4, 2]);
    let src = cpu(mixed(6, 2), &[3, 2]);
    let err = t.index_add(0, &index(&[0, 4, 1]), &src, 1.0).unwrap_err();
    assert_eq!(
        err,
        TensorError::IndexValueOutOfRange {
            op: "index_add",
            position: 1,
            value: 4,
            dim: 0,
            size: 4
        }
    );
    assert!(err.to_string().contains("index[1] = 4") && err.to_string().contains("0 <= index < 4"));
    assert!(matches!(
        t.index_add(0, &index(&[0, -1, 1]), &src, 1.0),
        Err(TensorError::IndexValueOutOfRange { value: -1, .. })
    ));
    let as_f32 = cpu(vec![0.0, 1.0, 2.0], &[3]);
    assert!(matches!(
        t.index_add(0, &as_f32, &src, 1.0),
        Err(TensorError::DTypeMismatch {
            expected: DType::I64,
            ..
        })
    ));
    assert!(matches!(
        t.index_add(0, &index(&[0, 1]), &src, 1.0),
        Err(TensorError::InvalidArgument { .. })
    ));
    assert!(matches!(
        t.index_add(1, &index(&[0, 1, 1]), &src, 1.0),
        Err(TensorError::InvalidArgument { .. })
    ));
    assert!(matches!(
        t.index_add(2, &index(&[0]), &src, 1.0),
        Err(TensorError::DimOutOfRange { .. })
    ));
    let matrix_index = Tensor::from_slice(&[0i64, 1, 2, 3], &[2, 2], Device::Cpu).unwrap();
    assert!(matches!(
        t.index_add(0, &matrix_index, &src, 1.0),
        Err(TensorError::RankMismatch { .. })
    ));
    let f64_src = src.to_dtype(DType::F64).unwrap();
    assert!(matches!(
        t.index_add(0, &index(&[0, 1, 2]), &f64_src, 1.0),
        Err(TensorError::DTypeMismatch { .. })
    ));
    let ints = Tensor::zeros(&[4, 2], DType::I64, Device::Cpu).unwrap();
    let int_src = Tensor::zeros(&[3, 2], DType::I64, Device::Cpu).unwrap();
    assert!(matches!(
        ints.index_add(0, &index(&[0, 1, 2]), &int_src, 1.0),
        Err(TensorError::UnsupportedDType { .. })
    ));
}

#[test]
fn deterministic_index_add_is_identical_on_every_thread_count() {
    // Large enough for the parallel paths, with mixed magnitudes: 20000 rows of 32 into
    // 50 targets (group partials), rows of 8 into 3000 targets (row ranges) and rows of
    // 4 into 3000 targets (owner rows): the three implementations of one order.
    for (size, n, inner) in [(50, 20_000, 32), (3000, 20_000, 8), (3000, 20_000, 4)] {
        let dst = cpu(mixed(size * inner, 5), &[size, inner]);
        let src = cpu(mixed(n * inner, 6), &[n, inner]);
        let idx = indices(n, size, 7);
        let want = grouped_index_add(
            &dst.to_vec::<f32>().unwrap(),
            &[size, inner],
            0,
            &idx,
            &src.to_vec::<f32>().unwrap(),
            1.0,
        );
        let want = bits_of(&want);
        for threads in [1, 2, 5] {
            for run in 0..3 {
                let got = on_threads(threads, || {
                    dst.index_add_with(0, &index(&idx), &src, 1.0, Algorithm::Deterministic)
                        .unwrap()
                });
                assert!(
                    bits(&got) == want,
                    "{size} targets, {threads} threads, run {run}: not the grouped order's bits"
                );
            }
        }
    }
}

#[test]
fn the_fast_index_add_adds_the_same_terms() {
    // Integer-valued terms add exactly in any order, so even the arrival-order path
    // must give the serial loop's values.
    let (size, n, inner) = (8, 10_000, 16);
    let whole = |v: Vec<f32>| v.iter().map(|x| x.round()).collect::<Vec<_>>();
    let dst = cpu(whole(mixed(size * inner, 8)), &[size, inner]);
    let src = cpu(whole(mixed(n * inner, 9)), &[n, inner]);
    let idx = index(&indices(n, size, 10));
    let fast = on_threads(2, || {
        dst.index_add_with(0, &idx, &src, 1.0, Algorithm::Fast)
            .unwrap()
    });
    let det = dst
        .index_add_with(0, &idx, &src, 1.0, Algorithm::Deterministic)
        .unwrap();
    assert_eq!(bits(&fast), bits(&det));
}

/// `out[p with p[dim] = index[p]] += src[p]` over the index's positions in row-major order.
fn serial_scatter_add(dst: &Tensor, dim: usize, index: &Tensor, src: &Tensor) -> Vec<f32> {
    let mut out = dst.to_vec::<f32>().unwrap();
    let (i_dims, s_dims, d_dims) = (
        index.dims().to_vec(),
        src.dims().to_vec(),
        dst.dims().to_vec(),
    );
    let idx = index.to_vec::<i64>().unwrap();
    let values = src.to_vec::<f32>().unwrap();
    for (e, &v) in idx.iter().enumerate() {
        let mut coords = vec![0; i_dims.len()];
        let mut rest = e;
        for d in (0..i_dims.len()).rev() {
            coords[d] = rest % i_dims[d];
            rest /= i_dims[d];
        }
        let at =
            |dims: &[usize], c: &[usize]| c.iter().zip(dims).fold(0, |acc, (&c, &d)| acc * d + c);
        let s = values[at(&s_dims, &coords)];
        coords[dim] = v as usize;
        let t = &mut out[at(&d_dims, &coords)];
        *t += s;
    }
    out
}

#[test]
fn scatter_add_matches_the_serial_loop() {
    let dst = cpu(mixed(4 * 5 * 3, 11), &[4, 5, 3]);
    let src = cpu(mixed(6 * 5 * 3, 12), &[6, 5, 3]);
    for dim in 0..3 {
        // An index smaller than src in every dim, and than dst except along `dim`.
        let i_dims = [3, 4, 2];
        let count: usize = i_dims.iter().product();
        let idx = Tensor::from_vec(
            indices(count, dst.dims()[dim], 13 + dim as u64),
            &i_dims,
            Device::Cpu,
        )
        .unwrap();
        let want = serial_scatter_add(&dst, dim, &idx, &src);
        for algorithm in [Algorithm::Auto, Algorithm::Deterministic, Algorithm::Fast] {
            let got = dst.scatter_add_with(dim, &idx, &src, algorithm).unwrap();
            assert_eq!(got.to_vec::<f32>().unwrap(), want, "dim {dim}");
        }
        let mut in_place = dst.clone();
        in_place.scatter_add_(dim, &idx, &src).unwrap();
        assert_eq!(in_place.to_vec::<f32>().unwrap(), want);
    }
    // Large, 2 lanes of 40000: identical bits for 1 and 2 threads.
    let dst = cpu(mixed(2 * 100, 14), &[2, 100]);
    let src = cpu(mixed(2 * 40_000, 15), &[2, 40_000]);
    let idx = Tensor::from_vec(indices(80_000, 100, 16), &[2, 40_000], Device::Cpu).unwrap();
    let want: Vec<u32> = serial_scatter_add(&dst, 1, &idx, &src)
        .iter()
        .map(|x| x.to_bits())
        .collect();
    for threads in [1, 2] {
        assert!(
            bits(&on_threads(threads, || dst
                .scatter_add(1, &idx, &src)
                .unwrap()))
                == want,
            "{threads} threads"
        );
    }
}

#[test]
fn scatter_add_rejects_bad_arguments_with_typed_errors() {
    let dst = cpu(mixed(6, 1), &[2, 3]);
    let src = cpu(mixed(6, 2), &[2, 3]);
    let idx = |v: &[i64], dims: &[usize]| Tensor::from_slice(v, dims, Device::Cpu).unwrap();
    assert!(matches!(
        dst.scatter_add(0, &idx(&[0, 2], &[1, 2]), &src),
        Err(TensorError::IndexValueOutOfRange {
            position: 1,
            value: 2,
            size: 2,
            ..
        })
    ));
    assert!(matches!(
        dst.scatter_add(0, &idx(&[0, 1], &[2]), &src),
        Err(TensorError::InvalidArgument { .. })
    ));
    assert!(matches!(
        dst.scatter_add(0, &idx(&[0; 8], &[2, 4]), &src),
        Err(TensorError::InvalidArgument { .. })
    ));
    assert!(matches!(
        dst.scatter_add(1, &idx(&[0; 3], &[3, 1]), &src),
        Err(TensorError::InvalidArgument { .. })
    ));
    let as_u32 = Tensor::from_slice(&[0u32, 1], &[1, 2], Device::Cpu).unwrap();
    assert!(matches!(
        dst.scatter_add(0, &as_u32, &src),
        Err(TensorError::DTypeMismatch { .. })
    ));
    assert!(matches!(
        dst.scatter_add(5, &idx(&[0], &[1, 1]), &src),
        Err(TensorError::DimOutOfRange { .. })
    ));
}
