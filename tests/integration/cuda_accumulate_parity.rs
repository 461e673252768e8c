//! The CUDA bodies of `index_add`, `scatter_add` and the one-pass atomic sum
//! (`crates/tensor-core/cuda/tensor_ops.cuh`), compiled for the host, against the CPU
//! ops (docs/contract.md §11).
//!
//! * The owner-computes (deterministic) bodies must give the CPU deterministic path's
//!   bits, whichever order their work items run in (forwards and backwards here; any
//!   launch configuration on a GPU).
//! * The atomic (fast) bodies run their items in one order on the host. With
//!   integer-valued data every order gives the same sum, so they must match exactly;
//!   with general data they must agree to rounding.

use crate::support;

use ::host_parity::tensor_ops::{self as host_parity, Body};
use ditto::tensor_core::{Algorithm, DType, Device, Tensor};
use support::{assert_same, values};

fn cpu(dims: &[usize], salt: u64) -> Tensor {
    Tensor::from_vec(
        values(dims.iter().product(), salt, false),
        dims,
        Device::Cpu,
    )
    .unwrap()
}

/// The same tensor with every element rounded to an integer (exact in any order).
fn whole(t: &Tensor) -> Tensor {
    let v: Vec<f32> = t
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| (x * 8.0).round())
        .collect();
    Tensor::from_vec(v, t.dims(), Device::Cpu).unwrap()
}

fn index(n: usize, size: usize, salt: u64, dims: &[usize]) -> Tensor {
    let v: Vec<i64> = (0..n as u64)
        .map(|i| ((i ^ salt).wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as i64 % size as i64)
        .collect();
    Tensor::from_vec(v, dims, Device::Cpu).unwrap()
}

fn close(what: &str, want: &Tensor, got: &Tensor, rel: f64) {
    let w = want.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    let g = got.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    for (i, (a, b)) in w.iter().zip(&g).enumerate() {
        assert!(
            (a - b).abs() <= rel * a.abs().max(1.0),
            "{what}: element {i}: {a} vs {b}"
        );
    }
}

#[test]
fn index_add_owner_bodies_give_the_cpu_bits_in_any_item_order() {
    let dims = [4, 6, 5];
    for (dim, n) in [(0, 3000), (1, 300), (2, 2100)] {
        let mut src_dims = dims.to_vec();
        src_dims[dim] = n;
        let (dst, src) = (cpu(&dims, 1), cpu(&src_dims, 2));
        let idx = index(n, dims[dim], 3, &[n]);
        let want = dst
            .index_add_with(dim, &idx, &src, 0.75, Algorithm::Deterministic)
            .unwrap();
        for body in [Body::Owner, Body::OwnerReversed] {
            let got = host_parity::index_add(&dst, dim, &idx, &src, 0.75, body).unwrap();
            assert_same(&format!("index_add dim {dim} {body:?}"), &got, &want);
        }
        let got = host_parity::index_add(&dst, dim, &idx, &src, 0.75, Body::Atomic).unwrap();
        close(&format!("index_add atomic dim {dim}"), &want, &got, 1e-5);
        let (dst, src) = (whole(&dst), whole(&src));
        let want = dst
            .index_add_with(dim, &idx, &src, 1.0, Algorithm::Deterministic)
            .unwrap();
        let got = host_parity::index_add(&dst, dim, &idx, &src, 1.0, Body::Atomic).unwrap();
        assert_same(
            &format!("index_add atomic, whole numbers, dim {dim}"),
            &got,
            &want,
        );
    }
    // f64, and an index that leaves rows untouched.
    let dst = cpu(&[9, 3], 4).to_dtype(DType::F64).unwrap();
    let src = cpu(&[5, 3], 5).to_dtype(DType::F64).unwrap();
    let idx = Tensor::from_slice(&[8i64, 0, 8, 8, 2], &[5], Device::Cpu).unwrap();
    let want = dst
        .index_add_with(0, &idx, &src, -2.0, Algorithm::Deterministic)
        .unwrap();
    for body in [Body::Owner, Body::OwnerReversed] {
        assert_same(
            "index_add f64",
            &host_parity::index_add(&dst, 0, &idx, &src, -2.0, body).unwrap(),
            &want,
        );
    }
}

#[test]
fn scatter_add_bodies_match_the_cpu() {
    let dst = cpu(&[5, 6, 4], 6);
    let src = cpu(&[7, 6, 5], 7);
    for dim in 0..3 {
        let i_dims = [4, 5, 3];
        let idx = index(60, dst.dims()[dim], 8 + dim as u64, &i_dims);
        let want = dst
            .scatter_add_with(dim, &idx, &src, Algorithm::Deterministic)
            .unwrap();
        for body in [Body::Owner, Body::OwnerReversed] {
            let got = host_parity::scatter_add(&dst, dim, &idx, &src, body).unwrap();
            assert_same(&format!("scatter_add dim {dim} {body:?}"), &got, &want);
        }
        let (wd, ws) = (whole(&dst), whole(&src));
        let want = wd.scatter_add(dim, &idx, &ws).unwrap();
        let got = host_parity::scatter_add(&wd, dim, &idx, &ws, Body::Atomic).unwrap();
        assert_same(
            &format!("scatter_add atomic, whole numbers, dim {dim}"),
            &got,
            &want,
        );
    }
}

#[test]
fn the_atomic_sum_body_adds_every_element_once() {
    let x = cpu(&[3, 5000], 9);
    let xw = whole(&x);
    for threads in [1, 7, 256, 100_000] {
        for (dim, mean) in [
            (Some(1), false),
            (Some(1), true),
            (Some(0), false),
            (None, false),
            (None, true),
        ] {
            let want = xw.sum_with(dim, false, Algorithm::Deterministic).unwrap();
            let want = if mean {
                xw.mean_with(dim, false, Algorithm::Deterministic).unwrap()
            } else {
                want
            };
            let got = host_parity::sum_atomic(&xw, dim, mean, threads).unwrap();
            assert_same(
                &format!("atomic sum {dim:?} mean {mean}, {threads} threads"),
                &got,
                &want,
            );
            let want = x.sum_with(dim, false, Algorithm::Deterministic).unwrap();
            let want = if mean {
                x.mean_with(dim, false, Algorithm::Deterministic).unwrap()
            } else {
                want
            };
            close(
                "atomic sum",
                &want,
                &host_parity::sum_atomic(&x, dim, mean, threads).unwrap(),
                1e-6,
            );
        }
    }
}
