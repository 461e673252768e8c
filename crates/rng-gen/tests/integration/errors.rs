//! Every kind of bad input gets its typed error, and a rejected call consumes no
//! randomness (the generator does not move).

use crate::common;

use rng_gen::{
    bernoulli, bits, dropout, dropout_backward, normal, rand, randint, randn, randperm, uniform,
    Generator, RngError,
};
use tensor_core::{DType, Device, Tensor, TensorError};

use common::{generator, rejected};

const CPU: Device = Device::Cpu;

#[test]
fn probabilities_outside_0_1() {
    for p in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
        let err = rejected(|g| bernoulli(&[4], p, DType::F32, CPU, Some(g)));
        assert!(
            matches!(
                err,
                RngError::InvalidProbability {
                    op: "bernoulli",
                    ..
                }
            ),
            "{err}"
        );
        let x = Tensor::zeros(&[4], DType::F32, CPU).unwrap();
        let err = rejected(|g| dropout(&x, p, true, Some(g)));
        assert!(
            matches!(err, RngError::InvalidProbability { op: "dropout", .. }),
            "{err}"
        );
    }
    assert!(rejected(|g| bernoulli(&[4], 2.0, DType::F32, CPU, Some(g)))
        .to_string()
        .contains("[0, 1]"));
}

#[test]
fn bad_uniform_ranges() {
    let cases: [(f64, f64, DType); 8] = [
        (1.0, 1.0, DType::F32),
        (2.0, 1.0, DType::F64),
        (f64::NAN, 1.0, DType::F32),
        (0.0, f64::INFINITY, DType::F64),
        (0.0, 1e5, DType::F16),         // beyond f16's range
        (1.0, 1.0 + 1e-12, DType::F32), // empty once rounded to f32
        (-3e38, 3e38, DType::F32),      // width overflows f32
        (0.0, 1e300, DType::F32),       // not representable in f32
    ];
    for (low, high, dtype) in cases {
        let err = rejected(|g| uniform(&[3], low, high, dtype, CPU, Some(g)));
        assert!(
            matches!(err, RngError::InvalidRange { op: "uniform", .. }),
            "[{low}, {high}) {dtype}: {err}"
        );
    }
    assert!(uniform(
        &[3],
        1.0,
        1.0 + 1e-12,
        DType::F64,
        CPU,
        Some(&generator(0, 0))
    )
    .is_ok());
}

#[test]
fn bad_normal_parameters() {
    for std in [-1.0, f64::NAN, f64::INFINITY, 1e300] {
        let err = rejected(|g| normal(&[3], 0.0, std, DType::F32, CPU, Some(g)));
        assert!(
            matches!(err, RngError::InvalidStd { .. }),
            "std {std}: {err}"
        );
    }
    for mean in [f64::NAN, f64::NEG_INFINITY] {
        let err = rejected(|g| normal(&[3], mean, 1.0, DType::F64, CPU, Some(g)));
        assert!(
            matches!(err, RngError::InvalidMean { .. }),
            "mean {mean}: {err}"
        );
    }
    assert!(
        normal(&[3], 0.0, 0.0, DType::F32, CPU, Some(&generator(0, 0))).is_ok(),
        "std 0 is allowed"
    );
    assert!(normal(&[3], 0.0, 1e300, DType::F64, CPU, Some(&generator(0, 0))).is_ok());
}

#[test]
fn unsupported_dtypes() {
    let unsupported = |err: RngError| matches!(err, RngError::UnsupportedDType { .. });
    for dtype in [DType::I64, DType::U32, DType::U8, DType::Bool] {
        assert!(
            unsupported(rejected(|g| rand(&[2], dtype, CPU, Some(g)))),
            "rand {dtype}"
        );
        assert!(
            unsupported(rejected(|g| randn(&[2], dtype, CPU, Some(g)))),
            "randn {dtype}"
        );
        let unit_uniform = |g: &Generator| uniform(&[2], 0.0, 1.0, dtype, CPU, Some(g));
        assert!(unsupported(rejected(unit_uniform)), "uniform {dtype}");
        let standard_normal = |g: &Generator| normal(&[2], 0.0, 1.0, dtype, CPU, Some(g));
        assert!(unsupported(rejected(standard_normal)), "normal {dtype}");
        let x = Tensor::zeros(&[2], dtype, CPU).unwrap();
        assert!(
            unsupported(rejected(|g| dropout(&x, 0.5, true, Some(g)))),
            "dropout {dtype}"
        );
    }
    for dtype in [DType::I64, DType::U32] {
        assert!(
            unsupported(rejected(|g| bernoulli(&[2], 0.5, dtype, CPU, Some(g)))),
            "bernoulli {dtype}"
        );
    }
    // f64 normals are CPU-only: refused on CUDA before anything else happens.
    let cuda = Generator::new(Device::Cuda(0));
    let err = randn(&[2], DType::F64, Device::Cuda(0), Some(&cuda)).unwrap_err();
    assert!(unsupported(err.clone()), "{err}");
    assert_eq!(cuda.offset(), 0);
    let message = rejected(|g| rand(&[2], DType::I64, CPU, Some(g))).to_string();
    assert!(
        message.contains("i64") && message.contains("f32"),
        "{message}"
    );
}

#[test]
fn shape_overflow() {
    let err = rejected(|g| rand(&[usize::MAX, 2], DType::F32, CPU, Some(g)));
    assert!(
        matches!(err, RngError::Tensor(TensorError::ShapeOverflow { .. })),
        "{err}"
    );
    let err = rejected(|g| randint(0, 2, &[1 << 40, 1 << 40], CPU, Some(g)));
    assert!(
        matches!(err, RngError::Tensor(TensorError::ShapeOverflow { .. })),
        "{err}"
    );
}

#[test]
fn empty_integer_ranges() {
    for (low, high) in [(5, 5), (5, 4), (i64::MAX, i64::MIN)] {
        let err = rejected(|g| randint(low, high, &[3], CPU, Some(g)));
        assert!(
            matches!(err, RngError::EmptyRange { op: "randint", .. }),
            "{err}"
        );
    }
}

#[test]
fn missing_cuda_devices() {
    let n = tensor_core::cuda::device_count();
    let missing = Device::Cuda(n + 3);
    let no_device = |err: RngError| matches!(err, RngError::NoSuchDevice { device, available } if device == missing && available == n);
    assert!(no_device(
        rand(&[2], DType::F32, missing, None).unwrap_err()
    ));
    let g = Generator::new(missing);
    assert!(no_device(
        randn(&[2], DType::F32, missing, Some(&g)).unwrap_err()
    ));
    assert!(no_device(bits(&[2], missing, Some(&g)).unwrap_err()));
    assert!(no_device(
        randint(0, 3, &[2], missing, Some(&g)).unwrap_err()
    ));
    assert!(no_device(randperm(4, missing, Some(&g)).unwrap_err()));
    assert!(no_device(
        bernoulli(&[2], 0.5, DType::U8, missing, Some(&g)).unwrap_err()
    ));
    assert_eq!(g.offset(), 0);
    assert!(rng_gen::default_generator(missing).is_err());
}

#[test]
fn generator_of_another_device() {
    let cuda_gen = Generator::new(Device::Cuda(0));
    let mismatch = |err: RngError| {
        matches!(
            err,
            RngError::GeneratorDeviceMismatch {
                generator: Device::Cuda(0),
                requested: Device::Cpu,
                ..
            }
        )
    };
    assert!(mismatch(
        rand(&[2], DType::F32, CPU, Some(&cuda_gen)).unwrap_err()
    ));
    assert!(mismatch(randperm(3, CPU, Some(&cuda_gen)).unwrap_err()));
    let x = Tensor::zeros(&[2], DType::F32, CPU).unwrap();
    assert!(mismatch(
        dropout(&x, 0.5, true, Some(&cuda_gen)).unwrap_err()
    ));
    assert_eq!(cuda_gen.offset(), 0);
    if tensor_core::cuda::device_count() > 0 {
        let err = rand(&[2], DType::F32, Device::Cuda(0), Some(&generator(0, 0))).unwrap_err();
        assert!(
            matches!(err, RngError::GeneratorDeviceMismatch { .. }),
            "{err}"
        );
    }
}

#[test]
fn dropout_backward_mismatches() {
    let x = Tensor::zeros(&[8], DType::F32, CPU).unwrap();
    let (_, state) = dropout(&x, 0.5, true, Some(&generator(0, 0))).unwrap();
    let grad = Tensor::zeros(&[9], DType::F32, CPU).unwrap();
    assert!(matches!(
        dropout_backward(&grad, &state),
        Err(RngError::DropoutSizeMismatch {
            expected: 8,
            got: 9
        })
    ));
    let grad = Tensor::zeros(&[8], DType::I64, CPU).unwrap();
    assert!(matches!(
        dropout_backward(&grad, &state),
        Err(RngError::UnsupportedDType { .. })
    ));
    let mut bad_mask = state.clone();
    bad_mask.packed_mask = Some(vec![0; 3].into());
    let grad = Tensor::zeros(&[8], DType::F32, CPU).unwrap();
    assert!(matches!(
        dropout_backward(&grad, &bad_mask),
        Err(RngError::InconsistentState { .. })
    ));
}
