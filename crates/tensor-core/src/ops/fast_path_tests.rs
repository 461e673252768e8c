//! The contiguous fast paths against the general strided paths, bit for bit.
//!
//! Every op is run on contiguous inputs (fast path) and on strided copies of the same
//! values (a view reading every other element of a buffer twice as long, which takes the
//! general path), over pseudo-random shapes including sizes at the `REDUCE_BLOCK`
//! boundaries.

use std::sync::Arc;

use super::REDUCE_BLOCK;
use crate::{CpuStorage, DType, Shape, Storage, Tensor};

type BinaryOp = fn(&Tensor, &Tensor) -> crate::Result<Tensor>;
type UnaryOp = fn(&Tensor) -> crate::Result<Tensor>;

/// xorshift64*: a small deterministic source for shapes and values.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Values in [-8, 8) with varied exponents, some exact ties, zeros of both signs,
    /// and (if `specials`) infinities and NaNs.
    fn value(&mut self, specials: bool) -> f64 {
        let r = self.next();
        match r % 64 {
            0 => 0.0,
            1 => -0.0,
            2 => 3.0,
            3 if specials => f64::NAN,
            4 if specials => f64::INFINITY,
            5 if specials => f64::NEG_INFINITY,
            _ => {
                let u = (r >> 11) as f64 / (1u64 << 53) as f64;
                (u * 16.0 - 8.0) * 2f64.powi((r % 7) as i32 - 3)
            }
        }
    }
}

/// A contiguous tensor of `dtype` with pseudo-random values.
fn random(rng: &mut Rng, dims: &[usize], dtype: DType, specials: bool) -> Tensor {
    let n: usize = dims.iter().product();
    let v: Vec<f64> = (0..n).map(|_| rng.value(specials)).collect();
    Tensor::from_vec(v, dims, crate::Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

/// The same values as `t`, as a non-contiguous view (every other element of a buffer
/// twice as long, starting at offset 1), so ops take their general strided paths.
fn strided(t: &Tensor) -> Tensor {
    let shape = Shape::new(t.dims()).unwrap();
    let n = t.elem_count();
    let strides: Vec<usize> = shape.contiguous_strides().iter().map(|s| s * 2).collect();
    let storage = match t.dtype() {
        DType::F32 => {
            let mut buf = vec![f32::NAN; 2 * n + 1];
            for (i, x) in t.to_vec::<f32>().unwrap().into_iter().enumerate() {
                buf[1 + 2 * i] = x;
            }
            CpuStorage::F32(buf)
        }
        DType::F64 => {
            let mut buf = vec![f64::NAN; 2 * n + 1];
            for (i, x) in t.to_vec::<f64>().unwrap().into_iter().enumerate() {
                buf[1 + 2 * i] = x;
            }
            CpuStorage::F64(buf)
        }
        other => panic!("no strided copy for {other}"),
    };
    let view = Tensor {
        storage: Arc::new(Storage::Cpu(storage)),
        shape,
        strides,
        offset: 1,
    };
    assert!(n <= 1 || !view.is_contiguous());
    view
}

/// Raw bits (f32 widened exactly to f64) of a float tensor, or the values of an i64.
fn bits(t: &Tensor) -> (Vec<usize>, Vec<u64>) {
    let v = match t.dtype() {
        DType::I64 => t
            .to_vec::<i64>()
            .unwrap()
            .into_iter()
            .map(|x| x as u64)
            .collect(),
        _ => t
            .to_dtype(DType::F64)
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
            .into_iter()
            .map(f64::to_bits)
            .collect(),
    };
    (t.dims().to_vec(), v)
}

fn same(what: &str, fast: &Tensor, general: &Tensor) {
    assert!(fast.is_contiguous());
    assert_eq!(bits(fast), bits(general), "{what}");
}

/// Shapes of rank 1 to 3 with sizes drawn to hit small, odd and block-boundary sizes.
fn shapes(rng: &mut Rng, count: usize) -> Vec<Vec<usize>> {
    const SIZES: [usize; 12] = [1, 2, 3, 7, 10, 16, 33, 64, 127, 256, 257, 1000];
    let mut out = vec![
        vec![REDUCE_BLOCK],
        vec![REDUCE_BLOCK + 1, 3],
        vec![REDUCE_BLOCK - 1, 2],
        vec![2 * REDUCE_BLOCK + 5, 1],
        vec![3, REDUCE_BLOCK + 1],
        vec![2, 2 * REDUCE_BLOCK, 2],
        vec![128, 256],
        vec![300, 257],
    ];
    while out.len() < count {
        let rank = 1 + rng.below(3);
        let mut dims: Vec<usize> = (0..rank).map(|_| SIZES[rng.below(SIZES.len())]).collect();
        // Keep every case small enough for the general path to stay quick.
        while dims.iter().product::<usize>() > 200_000 {
            dims[rng.below(rank)] = 1 + rng.below(5);
        }
        out.push(dims);
    }
    out
}

#[test]
fn binary_fast_paths_match_the_strided_path() {
    let mut rng = Rng(0x5EED_0001);
    for dims in shapes(&mut rng, 40) {
        for dtype in [DType::F32, DType::F64] {
            let a = random(&mut rng, &dims, dtype, true);
            let same_shape = random(&mut rng, &dims, dtype, true);
            // Suffix broadcasts: the last k dims, optionally with leading 1s; k = 0 is a
            // one-element tensor.
            let k = rng.below(dims.len() + 1);
            let mut row_dims = dims[dims.len() - k..].to_vec();
            if rng.below(2) == 0 {
                row_dims.insert(0, 1);
            }
            let row = random(&mut rng, &row_dims, dtype, true);
            let scalar = random(&mut rng, &[1], dtype, false);
            let ops: [(&str, BinaryOp); 4] = [
                ("add", Tensor::add),
                ("sub", Tensor::sub),
                ("mul", Tensor::mul),
                ("div", Tensor::div),
            ];
            for (name, op) in ops {
                for (lhs, rhs) in [
                    (&a, &same_shape),
                    (&a, &row),
                    (&row, &a),
                    (&a, &scalar),
                    (&scalar, &a),
                ] {
                    let what = format!("{name} {:?} {:?} {dtype}", lhs.dims(), rhs.dims());
                    let fast = op(lhs, rhs).unwrap();
                    same(&what, &fast, &op(&strided(lhs), &strided(rhs)).unwrap());
                    // One side strided: the other's fast layout must not be used alone.
                    same(&what, &fast, &op(lhs, &strided(rhs)).unwrap());
                }
            }
            // In-place add with a broadcast row, and copy-on-write of a shared buffer.
            if row.rank() > a.rank() {
                continue;
            }
            let mut inplace = a.clone();
            inplace.add_(&row).unwrap();
            same("add_", &inplace, &strided(&a).add(&strided(&row)).unwrap());
            let mut view = strided(&a);
            view.add_(&row).unwrap();
            assert_eq!(bits(&view), bits(&inplace), "add_ on a strided view");
            same("add_ leaves clones", &a, &strided(&a));
        }
    }
}

#[test]
fn unary_and_inplace_fast_paths_match_the_strided_path() {
    let mut rng = Rng(0x5EED_0002);
    for dims in shapes(&mut rng, 30) {
        for dtype in [DType::F32, DType::F64] {
            let a = random(&mut rng, &dims, dtype, true);
            let g = random(&mut rng, &dims, dtype, true);
            let s = strided(&a);
            let ops: [(&str, UnaryOp); 9] = [
                ("relu", Tensor::relu),
                ("exp", Tensor::exp),
                ("log", Tensor::log),
                ("sqrt", Tensor::sqrt),
                ("neg", Tensor::neg),
                ("affine", |t| t.affine(0.3, -0.1)),
                ("mul_scalar", |t| t.mul_scalar(-0.7)),
                ("add_scalar", |t| t.add_scalar(1.5)),
                ("powf", |t| t.powf(1.5)),
            ];
            for (name, op) in ops {
                same(name, &op(&a).unwrap(), &op(&s).unwrap());
            }
            same(
                "relu_backward",
                &Tensor::relu_backward(&g, &a).unwrap(),
                &Tensor::relu_backward(&strided(&g), &s).unwrap(),
            );
            let (mut fast, mut general) = (g.clone(), strided(&g));
            fast.axpy_(-0.01, &a).unwrap();
            general.axpy_(-0.01, &s).unwrap();
            assert_eq!(bits(&fast), bits(&general), "axpy_");
            fast.scale_(0.9).unwrap();
            general.scale_(0.9).unwrap();
            assert_eq!(bits(&fast), bits(&general), "scale_");
            same("axpy_ leaves clones", &g, &strided(&g));
        }
    }
}

#[test]
fn reduction_fast_paths_match_the_strided_path() {
    let mut rng = Rng(0x5EED_0003);
    for dims in shapes(&mut rng, 40) {
        for dtype in [DType::F32, DType::F64] {
            // Sums without specials (so the bits compare finite values), maxima with.
            let a = random(&mut rng, &dims, dtype, false);
            let s = strided(&a);
            let m = random(&mut rng, &dims, dtype, true);
            let ms = strided(&m);
            for dim in 0..dims.len() {
                let what = format!("{dims:?} dim {dim} {dtype}");
                for keepdim in [false, true] {
                    same(
                        &format!("sum_dim {what}"),
                        &a.sum_dim(dim, keepdim).unwrap(),
                        &s.sum_dim(dim, keepdim).unwrap(),
                    );
                    same(
                        &format!("mean_dim {what}"),
                        &a.mean_dim(dim, keepdim).unwrap(),
                        &s.mean_dim(dim, keepdim).unwrap(),
                    );
                    same(
                        &format!("max_dim {what}"),
                        &m.max_dim(dim, keepdim).unwrap(),
                        &ms.max_dim(dim, keepdim).unwrap(),
                    );
                }
                same(
                    &format!("argmax {what}"),
                    &m.argmax(dim).unwrap(),
                    &ms.argmax(dim).unwrap(),
                );
                same(
                    &format!("log_softmax {what}"),
                    &a.log_softmax(dim).unwrap(),
                    &s.log_softmax(dim).unwrap(),
                );
                same(
                    &format!("log_softmax with specials {what}"),
                    &m.log_softmax(dim).unwrap(),
                    &ms.log_softmax(dim).unwrap(),
                );
            }
            same("sum_all", &a.sum_all().unwrap(), &s.sum_all().unwrap());
            same("mean_all", &a.mean_all().unwrap(), &s.mean_all().unwrap());
        }
    }
}

#[test]
fn views_with_an_offset_take_the_fast_path_and_agree() {
    // A contiguous view that does not start at element 0 (narrowed rows).
    let mut rng = Rng(0x5EED_0004);
    let base = random(&mut rng, &[40, 1030], DType::F32, false);
    let rows = base.narrow(0, 3, 30).unwrap();
    assert!(rows.is_contiguous() && rows.storage_offset() > 0);
    let row = random(&mut rng, &[1030], DType::F32, false);
    let s = strided(&rows);
    same("add", &rows.add(&row).unwrap(), &s.add(&row).unwrap());
    for dim in 0..2 {
        same(
            "sum_dim",
            &rows.sum_dim(dim, false).unwrap(),
            &s.sum_dim(dim, false).unwrap(),
        );
        same(
            "log_softmax",
            &rows.log_softmax(dim).unwrap(),
            &s.log_softmax(dim).unwrap(),
        );
    }
    let mut w = rows.clone();
    w.axpy_(0.5, &rows).unwrap();
    let mut ws = s.clone();
    ws.axpy_(0.5, &s).unwrap();
    assert_eq!(bits(&w), bits(&ws));
    assert_eq!(bits(&base.narrow(0, 3, 30).unwrap()), bits(&rows));
}

#[test]
fn add_in_place_checks_its_operands() {
    let mut rng = Rng(0x5EED_0005);
    let mut a = random(&mut rng, &[2, 3], DType::F32, false);
    let wide = random(&mut rng, &[4, 2, 3], DType::F32, false);
    assert!(matches!(
        a.add_(&wide),
        Err(crate::TensorError::ShapeMismatch { op: "add_", .. })
    ));
    let other = random(&mut rng, &[3], DType::F64, false);
    assert!(matches!(
        a.add_(&other),
        Err(crate::TensorError::DTypeMismatch { .. })
    ));
}
