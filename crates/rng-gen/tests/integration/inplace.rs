//! The in-place forms (`uniform_`, `normal_`, `bernoulli_`, `random_`, `bits_`,
//! `dropout_into`) give the same values and move the generator exactly as the allocating
//! ops do, write only their tensor (copy-on-write for shared storage), and refuse what
//! they cannot fill with typed errors, without moving the generator.

use crate::common;

use rng_gen::{
    bernoulli, bernoulli_, bits, bits_, dropout, dropout_into, dropout_with_mask, normal, normal_,
    randint, random_, uniform, uniform_, Generator, RngError,
};
use tensor_core::{DType, Device, Tensor, TensorError};

use common::{generator, rejected};

const CPU: Device = Device::Cpu;
const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
const SIZES: [usize; 5] = [0, 1, 5, 1000, 70_001];

/// Element bits of any tensor, as f64 bits (exact for every dtype).
fn bits_of(t: &Tensor) -> Vec<u64> {
    t.to_dtype(DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
        .into_iter()
        .map(f64::to_bits)
        .collect()
}

/// Runs the allocating `alloc` and the in-place `inplace` (on a tensor of `dtype`
/// holding junk) from equal generators: same values, same offset afterwards.
fn same_as_allocating(
    what: &str,
    dims: &[usize],
    dtype: DType,
    alloc: impl Fn(&Generator) -> Tensor,
    inplace: impl Fn(&mut Tensor, &Generator),
) {
    let (a, b) = (generator(9, u64::MAX - 7), generator(9, u64::MAX - 7));
    let expected = alloc(&a);
    let mut t = Tensor::full(dims, 3.0, dtype, CPU).unwrap();
    inplace(&mut t, &b);
    assert_eq!(bits_of(&t), bits_of(&expected), "{what} {dtype:?} {dims:?}");
    assert_eq!(a.offset(), b.offset(), "{what} {dtype:?} {dims:?}: offsets");
}

#[test]
fn every_in_place_op_matches_its_allocating_op() {
    for n in SIZES {
        let dims = [n];
        for dtype in FLOATS {
            same_as_allocating(
                "uniform_",
                &dims,
                dtype,
                |g| uniform(&dims, -2.0, 5.0, dtype, CPU, Some(g)).unwrap(),
                |t, g| uniform_(t, -2.0, 5.0, Some(g)).unwrap(),
            );
            same_as_allocating(
                "normal_",
                &dims,
                dtype,
                |g| normal(&dims, 1.5, 0.25, dtype, CPU, Some(g)).unwrap(),
                |t, g| normal_(t, 1.5, 0.25, Some(g)).unwrap(),
            );
        }
        for dtype in [
            DType::F32,
            DType::F64,
            DType::F16,
            DType::BF16,
            DType::U8,
            DType::Bool,
        ] {
            same_as_allocating(
                "bernoulli_",
                &dims,
                dtype,
                |g| bernoulli(&dims, 0.3, dtype, CPU, Some(g)).unwrap(),
                |t, g| bernoulli_(t, 0.3, Some(g)).unwrap(),
            );
        }
        same_as_allocating(
            "random_",
            &dims,
            DType::I64,
            |g| randint(-5, 1 << 40, &dims, CPU, Some(g)).unwrap(),
            |t, g| random_(t, -5, 1 << 40, Some(g)).unwrap(),
        );
        same_as_allocating(
            "bits_",
            &dims,
            DType::U32,
            |g| bits(&dims, CPU, Some(g)).unwrap(),
            |t, g| bits_(t, Some(g)).unwrap(),
        );
    }
}

#[test]
fn dropout_into_matches_dropout() {
    for n in SIZES {
        for dtype in FLOATS {
            let x = uniform(&[n], -1.0, 1.0, dtype, CPU, Some(&generator(1, 0))).unwrap();
            for (p, train) in [(0.4, true), (0.0, true), (1.0, true), (0.4, false)] {
                for keep_mask in [false, true] {
                    let (a, b) = (generator(2, 77), generator(2, 77));
                    let (expected, state) = if keep_mask {
                        dropout_with_mask(&x, p, train, Some(&a)).unwrap()
                    } else {
                        dropout(&x, p, train, Some(&a)).unwrap()
                    };
                    let mut out = Tensor::full(&[n], 9.0, dtype, CPU).unwrap();
                    let got = dropout_into(&x, p, train, &mut out, Some(&b), keep_mask).unwrap();
                    assert_eq!(bits_of(&out), bits_of(&expected), "{dtype:?} n {n} p {p}");
                    assert_eq!(got, state);
                    assert_eq!(a.offset(), b.offset());
                }
            }
        }
    }
}

#[test]
fn in_place_writes_only_its_own_storage() {
    let original = Tensor::zeros(&[64], DType::F32, CPU).unwrap();
    let mut copy = original.clone();
    uniform_(&mut copy, 0.0, 1.0, Some(&generator(3, 0))).unwrap();
    assert!(original.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0));
    assert!(copy.to_vec::<f32>().unwrap().iter().any(|&v| v != 0.0));
    // A contiguous view (a narrowed row) is filled in place, the rest untouched.
    let base = Tensor::zeros(&[4, 8], DType::F32, CPU).unwrap();
    let mut row = base.narrow(0, 2, 1).unwrap();
    normal_(&mut row, 0.0, 1.0, Some(&generator(3, 0))).unwrap();
    let expected = normal(&[1, 8], 0.0, 1.0, DType::F32, CPU, Some(&generator(3, 0))).unwrap();
    assert_eq!(bits_of(&row), bits_of(&expected));
}

#[test]
fn typed_errors() {
    let strided = Tensor::zeros(&[4, 3], DType::F32, CPU)
        .unwrap()
        .t()
        .unwrap();
    let err = rejected(|g| uniform_(&mut strided.clone(), 0.0, 1.0, Some(g)));
    assert!(
        matches!(err, RngError::Tensor(TensorError::NotContiguous { .. })),
        "{err}"
    );
    let mut ints = Tensor::zeros(&[4], DType::I64, CPU).unwrap();
    let err = rejected(|g| normal_(&mut ints, 0.0, 1.0, Some(g)));
    assert!(
        matches!(err, RngError::UnsupportedDType { op: "normal_", .. }),
        "{err}"
    );
    let mut floats = Tensor::zeros(&[4], DType::F32, CPU).unwrap();
    let err = rejected(|g| random_(&mut floats, 0, 10, Some(g)));
    assert!(
        matches!(err, RngError::UnsupportedDType { op: "random_", .. }),
        "{err}"
    );
    let err = rejected(|g| bits_(&mut floats, Some(g)));
    assert!(
        matches!(err, RngError::Tensor(TensorError::DTypeMismatch { .. })),
        "{err}"
    );
    let err = rejected(|g| bernoulli_(&mut floats, 1.5, Some(g)));
    assert!(matches!(err, RngError::InvalidProbability { .. }), "{err}");
    let err = rejected(|g| random_(&mut ints, 5, 5, Some(g)));
    assert!(matches!(err, RngError::EmptyRange { .. }), "{err}");
    let x = Tensor::zeros(&[4], DType::F32, CPU).unwrap();
    let mut wrong_dims = Tensor::zeros(&[5], DType::F32, CPU).unwrap();
    let err =
        rejected(|g| dropout_into(&x, 0.5, true, &mut wrong_dims, Some(g), false).map(|_| ()));
    assert!(
        matches!(err, RngError::Tensor(TensorError::ShapeMismatch { .. })),
        "{err}"
    );
    let mut wrong_dtype = Tensor::zeros(&[4], DType::F64, CPU).unwrap();
    let err =
        rejected(|g| dropout_into(&x, 0.5, true, &mut wrong_dtype, Some(g), false).map(|_| ()));
    assert!(
        matches!(err, RngError::Tensor(TensorError::DTypeMismatch { .. })),
        "{err}"
    );
    let cuda_generator = Generator::new(Device::Cuda(0));
    let err = uniform_(&mut floats, 0.0, 1.0, Some(&cuda_generator)).unwrap_err();
    assert!(
        matches!(err, RngError::GeneratorDeviceMismatch { .. }),
        "{err}"
    );
}
