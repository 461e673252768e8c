//! ditto's random ops on a CUDA GPU against the CPU, bit for bit (docs/contract.md §1,
//! §11).
//!
//! Every op and dtype, at sizes 1, 3, 4, 5, 1000 and 2^20 + 3, through the public ops
//! (automatic launch) and through the launchers with forced launch geometries; the
//! generator state shared between CPU and CUDA; state bytes round trips; offsets.
//!
//! These are real tests whenever a GPU is present. Without one each test prints
//! `skipping: <reason>` and passes, unless `REQUIRE_GPU=1`, which turns the skip into a
//! failure (the GPU machines run them that way, see `scripts/gpu_bundle.sh`).

use crate::support;

use ditto::kernels::{launch, Grid, Launch};
use ditto::rng_gen::{self, Generator, Key, RngError};
use ditto::tensor_core::cuda::{self, CudaStorage};
use ditto::tensor_core::{bf16, f16, CudaError, DType, Device, Storage, Tensor, TensorError};
use support::{assert_same, gpu};

const SIZES: [usize; 6] = [1, 3, 4, 5, 1000, (1 << 20) + 3];
const GPU: Device = Device::Cuda(0);

/// Launch geometries that must all give the same tensor: one thread in all, odd
/// sizes, a single warp, and a full-size grid.
const GRIDS: [Grid; 5] = [
    Grid {
        blocks: 1,
        threads: 1,
    },
    Grid {
        blocks: 1,
        threads: 32,
    },
    Grid {
        blocks: 7,
        threads: 96,
    },
    Grid {
        blocks: 3,
        threads: 1000,
    },
    Grid {
        blocks: 4096,
        threads: 256,
    },
];

/// One random op with its parameters, runnable on either device.
#[derive(Clone, Copy, Debug)]
enum Op {
    Bits,
    Uniform(f64, f64),
    Normal(f64, f64),
    Bernoulli(f64),
    Randint(i64, i64),
}

impl Op {
    fn run(
        self,
        n: usize,
        dtype: DType,
        device: Device,
        g: &Generator,
    ) -> Result<Tensor, RngError> {
        let shape = [n];
        match self {
            Op::Bits => rng_gen::bits(&shape, device, Some(g)),
            Op::Uniform(lo, hi) => rng_gen::uniform(&shape, lo, hi, dtype, device, Some(g)),
            Op::Normal(mean, std) => rng_gen::normal(&shape, mean, std, dtype, device, Some(g)),
            Op::Bernoulli(p) => rng_gen::bernoulli(&shape, p, dtype, device, Some(g)),
            Op::Randint(lo, hi) => rng_gen::randint(lo, hi, &shape, device, Some(g)),
        }
    }

    /// The same op through the launcher directly, with a forced geometry.
    fn launch(self, out: &mut CudaStorage, key: Key, launch_with: Launch) -> kernels::Result<()> {
        let (seed, offset) = (key.seed, key.offset);
        match self {
            Op::Bits => launch::bits(out, seed, offset, launch_with),
            Op::Uniform(lo, hi) => launch::uniform(out, seed, offset, lo, hi, launch_with),
            Op::Normal(mean, std) => {
                launch::normal(out, seed, offset, mean as f32, std as f32, launch_with)
            }
            Op::Bernoulli(p) => launch::bernoulli(out, seed, offset, p as f32, launch_with),
            Op::Randint(lo, hi) => launch::randint(
                out,
                seed,
                offset,
                lo,
                (i128::from(hi) - i128::from(lo)) as u64,
                launch_with,
            ),
        }
    }

    /// The dtypes the op is tested in (all that CUDA supports).
    fn dtypes(self) -> &'static [DType] {
        match self {
            Op::Bits => &[DType::U32],
            Op::Uniform(..) => &[DType::F32, DType::F16, DType::BF16, DType::F64],
            Op::Normal(..) => &[DType::F32, DType::F16, DType::BF16],
            Op::Bernoulli(_) => &[
                DType::F32,
                DType::F16,
                DType::BF16,
                DType::F64,
                DType::U8,
                DType::Bool,
            ],
            Op::Randint(..) => &[DType::I64],
        }
    }
}

const OPS: [Op; 8] = [
    Op::Bits,
    Op::Uniform(0.0, 1.0),
    Op::Uniform(-3.5, 2.25),
    Op::Normal(0.0, 1.0),
    Op::Normal(2.5, 0.75),
    Op::Bernoulli(0.3),
    Op::Randint(-5, 17),
    Op::Randint(i64::MIN, i64::MAX),
];

const KEYS: [Key; 3] = [
    Key { seed: 0, offset: 0 },
    Key {
        seed: 0x0123_4567_89ab_cdef,
        offset: 12_345,
    },
    Key {
        seed: u64::MAX,
        offset: u64::MAX - 3,
    }, // blocks wrap past 2^64
];

#[test]
fn every_op_matches_the_cpu_for_every_size_and_launch_geometry() {
    test_support::own_process!(every_op_matches_the_cpu_for_every_size_and_launch_geometry);
    if !gpu() {
        return;
    }
    for op in OPS {
        for &dtype in op.dtypes() {
            for key in KEYS {
                for n in SIZES {
                    let what = format!("{op:?} {dtype} n={n} {key:?}");
                    let cpu_gen = Generator::from_key(Device::Cpu, key);
                    let cpu = op.run(n, dtype, Device::Cpu, &cpu_gen).unwrap();
                    let gpu_gen = Generator::from_key(GPU, key);
                    let gpu = op
                        .run(n, dtype, GPU, &gpu_gen)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_same(&what, &gpu, &cpu);
                    assert_eq!(
                        gpu_gen.offset(),
                        cpu_gen.offset(),
                        "{what}: offsets advance identically"
                    );
                    for grid in GRIDS {
                        let mut out = CudaStorage::alloc(0, dtype, n).unwrap();
                        op.launch(&mut out, key, Launch::Fixed(grid))
                            .unwrap_or_else(|e| panic!("{what} {grid:?}: {e}"));
                        let forced = Tensor::from_storage(Storage::Cuda(out), &[n]).unwrap();
                        assert_same(&format!("{what} {grid:?}"), &forced, &cpu);
                    }
                }
            }
        }
    }
}

#[test]
fn dropout_matches_the_cpu_forward_and_backward() {
    test_support::own_process!(dropout_matches_the_cpu_forward_and_backward);
    if !gpu() {
        return;
    }
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::F64] {
        for n in SIZES {
            let values: Vec<f64> = (0..n).map(|i| (i % 1000) as f64 * 0.37 - 100.0).collect();
            let x_cpu = Tensor::from_vec(values, &[n], Device::Cpu)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let x_gpu = x_cpu.to_device(GPU).unwrap();
            for p in [0.1, 0.5, 1.0] {
                for key in KEYS {
                    let what = format!("dropout {dtype} n={n} p={p} {key:?}");
                    let cpu_gen = Generator::from_key(Device::Cpu, key);
                    let gpu_gen = Generator::from_key(GPU, key);
                    let (y_cpu, s_cpu) =
                        rng_gen::dropout_with_mask(&x_cpu, p, true, Some(&cpu_gen)).unwrap();
                    let (y_gpu, s_gpu) =
                        rng_gen::dropout_with_mask(&x_gpu, p, true, Some(&gpu_gen)).unwrap();
                    assert_same(&what, &y_gpu, &y_cpu);
                    assert_eq!(s_gpu.packed_mask, s_cpu.packed_mask, "{what}: packed mask");
                    assert_eq!(gpu_gen.offset(), cpu_gen.offset(), "{what}: offsets");
                    let (y_plain, s_plain) =
                        rng_gen::dropout(&x_gpu, p, true, Some(&Generator::from_key(GPU, key)))
                            .unwrap();
                    assert_same(&format!("{what} without mask"), &y_plain, &y_cpu);

                    let grad_cpu = x_cpu.clone();
                    let back_cpu = rng_gen::dropout_backward(&grad_cpu, &s_cpu).unwrap();
                    let grad_gpu = grad_cpu.to_device(GPU).unwrap();
                    assert_same(
                        &format!("{what} backward (mask)"),
                        &rng_gen::dropout_backward(&grad_gpu, &s_gpu).unwrap(),
                        &back_cpu,
                    );
                    assert_same(
                        &format!("{what} backward (regenerated)"),
                        &rng_gen::dropout_backward(&grad_gpu, &s_plain).unwrap(),
                        &back_cpu,
                    );
                }
            }
        }
    }
}

/// Every 16-bit pattern of f16 and bf16 (zeros, subnormals, infinities, NaNs with
/// payloads) through dropout: a kept element is converted to f32, scaled and rounded
/// back, so this checks the device's half conversions (the GPU uses its conversion
/// instructions for everything but NaN) against the CPU's over their whole domain, at
/// an exact scale (p = 0.5) and a rounding one (p = 0.1).
#[test]
fn dropout_converts_every_half_precision_pattern_as_the_cpu_does() {
    test_support::own_process!(dropout_converts_every_half_precision_pattern_as_the_cpu_does);
    if !gpu() {
        return;
    }
    let patterns: Vec<u16> = (0..=u16::MAX).collect();
    let inputs = [
        Tensor::from_vec(
            patterns.iter().map(|&b| f16::from_bits(b)).collect(),
            &[patterns.len()],
            Device::Cpu,
        )
        .unwrap(),
        Tensor::from_vec(
            patterns.iter().map(|&b| bf16::from_bits(b)).collect(),
            &[patterns.len()],
            Device::Cpu,
        )
        .unwrap(),
    ];
    for x_cpu in &inputs {
        for p in [0.5, 0.1] {
            let key = Key {
                seed: 99,
                offset: 0,
            };
            let what = format!("dropout {} p={p} over every bit pattern", x_cpu.dtype());
            let (y_cpu, _) =
                rng_gen::dropout(x_cpu, p, true, Some(&Generator::from_key(Device::Cpu, key)))
                    .unwrap();
            let (y_gpu, _) = rng_gen::dropout(
                &x_cpu.to_device(GPU).unwrap(),
                p,
                true,
                Some(&Generator::from_key(GPU, key)),
            )
            .unwrap();
            // A kept NaN is multiplied by the scale, and the GPU's multiply returns its
            // canonical NaN (0x7fff after rounding; the CPU keeps the payload: 0x7c03 gave
            // 0x7e03 on x86), so NaNs compare as values; every other pattern is compared
            // bit for bit.
            assert_same(&what, &y_gpu, &y_cpu);
        }
    }
}

#[test]
fn dropout_launch_geometry_does_not_change_values_or_mask() {
    test_support::own_process!(dropout_launch_geometry_does_not_change_values_or_mask);
    if !gpu() {
        return;
    }
    let n = (1 << 20) + 3;
    let x = Tensor::arange(0.0, n as f64, 1.0, DType::F32, Device::Cpu)
        .unwrap()
        .to_device(GPU)
        .unwrap();
    let Storage::Cuda(x_storage) = x.storage() else {
        panic!("x is on the GPU")
    };
    let words = kernels::packed_mask_words(n as u64) as usize;
    let run = |launch_with| {
        let mut y = CudaStorage::alloc(0, DType::F32, n).unwrap();
        let mut mask = CudaStorage::alloc(0, DType::U32, words).unwrap();
        launch::dropout(
            x_storage,
            &mut y,
            Some(&mut mask),
            9,
            99,
            0.5,
            2.0,
            launch_with,
        )
        .unwrap();
        (y.to_cpu().unwrap(), mask.to_cpu().unwrap())
    };
    let reference = run(Launch::Auto);
    for grid in GRIDS {
        assert!(
            run(Launch::Fixed(grid)) == reference,
            "dropout with {grid:?}"
        );
    }
}

#[test]
fn randperm_matches_the_cpu() {
    test_support::own_process!(randperm_matches_the_cpu);
    if !gpu() {
        return;
    }
    for n in [0, 1, 2, 5, 1000] {
        let key = Key {
            seed: 77,
            offset: 5,
        };
        let cpu = rng_gen::randperm(n, Device::Cpu, Some(&Generator::from_key(Device::Cpu, key)))
            .unwrap();
        let gpu = rng_gen::randperm(n, GPU, Some(&Generator::from_key(GPU, key))).unwrap();
        assert_eq!(gpu.device(), GPU);
        assert_same(&format!("randperm {n}"), &gpu, &cpu);
    }
}

#[test]
fn the_same_seed_on_cpu_and_cuda_gives_the_same_tensors() {
    test_support::own_process!(the_same_seed_on_cpu_and_cuda_gives_the_same_tensors);
    if !gpu() {
        return;
    }
    let (cpu_gen, gpu_gen) = (Generator::new(Device::Cpu), Generator::new(GPU));
    cpu_gen.manual_seed(2024);
    gpu_gen.manual_seed(2024);
    for (i, op) in OPS.into_iter().enumerate() {
        let dtype = op.dtypes()[i % op.dtypes().len()];
        let cpu = op.run(777, dtype, Device::Cpu, &cpu_gen).unwrap();
        let gpu = op.run(777, dtype, GPU, &gpu_gen).unwrap();
        assert_same(&format!("step {i}: {op:?} {dtype}"), &gpu, &cpu);
        assert_eq!(gpu_gen.key(), cpu_gen.key(), "after step {i}");
    }
}

#[test]
fn state_bytes_round_trip_through_get_and_set_rng_state_all() {
    test_support::own_process!(state_bytes_round_trip_through_get_and_set_rng_state_all);
    if !gpu() {
        return;
    }
    rng_gen::cuda::manual_seed_all(31);
    let states = rng_gen::cuda::get_rng_state_all();
    assert_eq!(states.len(), cuda::device_count());
    let first = rng_gen::randn(&[4099], DType::F32, GPU, None).unwrap();
    rng_gen::cuda::set_rng_state_all(&states).unwrap();
    let again = rng_gen::randn(&[4099], DType::F32, GPU, None).unwrap();
    assert_same("randn after set_rng_state_all", &again, &first);
    // A CUDA state is a valid CPU state: the CPU continues the same stream.
    let cpu_gen = Generator::new(Device::Cpu);
    cpu_gen.set_state(&states[0]).unwrap();
    let on_cpu = rng_gen::randn(&[4099], DType::F32, Device::Cpu, Some(&cpu_gen)).unwrap();
    assert_same("randn from the CUDA state on the CPU", &first, &on_cpu);
    // Wrong count: a typed error, nothing changed.
    assert!(matches!(
        rng_gen::cuda::set_rng_state_all(&[]),
        Err(RngError::DeviceCountMismatch { .. })
    ));
}

#[test]
fn a_missing_device_is_a_typed_error_not_a_panic() {
    test_support::own_process!(a_missing_device_is_a_typed_error_not_a_panic);
    // Runs with or without a GPU: ask for one ordinal past the last device.
    let missing = Device::Cuda(cuda::device_count());
    let results = [
        rng_gen::rand(&[8], DType::F32, missing, None).map(|_| ()),
        rng_gen::randn(&[8], DType::F16, missing, None).map(|_| ()),
        rng_gen::bernoulli(&[8], 0.5, DType::Bool, missing, None).map(|_| ()),
        rng_gen::bits(&[8], missing, None).map(|_| ()),
        rng_gen::randperm(8, missing, None).map(|_| ()),
    ];
    for result in results {
        match result {
            Err(
                RngError::NoSuchDevice { .. }
                | RngError::Tensor(TensorError::Cuda(CudaError::Unavailable { .. })),
            ) => {}
            other => panic!("expected a typed no-device error for {missing}, got {other:?}"),
        }
    }
    let mut out_of_range = CudaStorage::alloc(cuda::device_count(), DType::F32, 8);
    assert!(out_of_range.is_err(), "allocating on {missing} must fail");
    if let Ok(out) = out_of_range.as_mut() {
        assert!(launch::uniform(out, 0, 0, 0.0, 1.0, Launch::Auto).is_err());
    }
}

/// The in-place forms on CUDA tensors, including a contiguous view that starts inside
/// its buffer (the kernel gets the offset), equal the CPU's allocating ops, and leave
/// the rest of the buffer alone.
#[test]
fn in_place_ops_on_cuda_tensors_match_the_cpu() {
    test_support::own_process!(in_place_ops_on_cuda_tensors_match_the_cpu);
    if !gpu() {
        return;
    }
    let key = Key {
        seed: 0xfeed,
        offset: u64::MAX - 1,
    };
    for n in [1usize, 5, 1000, (1 << 16) + 3] {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let cpu = rng_gen::normal(
                &[1, n],
                1.0,
                2.0,
                dtype,
                Device::Cpu,
                Some(&Generator::from_key(Device::Cpu, key)),
            )
            .unwrap();
            let base = Tensor::zeros(&[3, n], dtype, GPU).unwrap();
            let mut row = base.narrow(0, 1, 1).unwrap();
            let g = Generator::from_key(GPU, key);
            rng_gen::normal_(&mut row, 1.0, 2.0, Some(&g)).unwrap();
            assert_same(&format!("normal_ {dtype} {n}"), &row, &cpu);
            let cpu_u = rng_gen::uniform(
                &[n],
                -1.0,
                3.0,
                dtype,
                Device::Cpu,
                Some(&Generator::from_key(Device::Cpu, key)),
            )
            .unwrap();
            let mut t = Tensor::zeros(&[n], dtype, GPU).unwrap();
            rng_gen::uniform_(&mut t, -1.0, 3.0, Some(&Generator::from_key(GPU, key))).unwrap();
            assert_same(&format!("uniform_ {dtype} {n}"), &t, &cpu_u);
            let zeros = Tensor::zeros(&[1, n], dtype, Device::Cpu).unwrap();
            let untouched = base.narrow(0, 0, 1).unwrap();
            assert_same("row 0 untouched", &untouched, &zeros);
        }
        let cpu_b = rng_gen::bits(
            &[n],
            Device::Cpu,
            Some(&Generator::from_key(Device::Cpu, key)),
        )
        .unwrap();
        let mut t = Tensor::zeros(&[n], DType::U32, GPU).unwrap();
        rng_gen::bits_(&mut t, Some(&Generator::from_key(GPU, key))).unwrap();
        assert_same("bits_", &t, &cpu_b);
        let x_cpu = support::cpu_tensor(&[n], 3);
        let x_gpu = x_cpu.to_device(GPU).unwrap();
        let (want, want_state) = rng_gen::dropout_with_mask(
            &x_cpu,
            0.3,
            true,
            Some(&Generator::from_key(Device::Cpu, key)),
        )
        .unwrap();
        let mut out = Tensor::zeros(&[n], DType::F32, GPU).unwrap();
        let state = rng_gen::dropout_into(
            &x_gpu,
            0.3,
            true,
            &mut out,
            Some(&Generator::from_key(GPU, key)),
            true,
        )
        .unwrap();
        assert_same("dropout_into", &out, &want);
        assert_eq!(state, want_state);
    }
}

/// A sampler with no CUDA body runs on the host and is copied to the device: the same
/// values and offsets as on the CPU.
#[test]
fn a_sampler_without_a_cuda_body_is_filled_on_the_host() {
    test_support::own_process!(a_sampler_without_a_cuda_body_is_filled_on_the_host);
    if !gpu() {
        return;
    }
    struct Xor;
    impl rng_gen::Sampler for Xor {
        type Elem = u32;
        fn name(&self) -> &'static str {
            "xor"
        }
        fn layout(&self) -> rng_gen::Layout {
            rng_gen::Layout::per_element(2)
        }
        fn fill_group(&self, _group: u64, words: &[u32], out: &mut [u32]) {
            out[0] = words[0] ^ words[1];
        }
    }
    let key = Key { seed: 5, offset: 9 };
    let (cg, gg) = (
        Generator::from_key(Device::Cpu, key),
        Generator::from_key(GPU, key),
    );
    let cpu = rng_gen::sample(Xor, &[1001], Device::Cpu, Some(&cg)).unwrap();
    let gpu = rng_gen::sample(Xor, &[1001], GPU, Some(&gg)).unwrap();
    assert_same("host-filled sampler", &gpu, &cpu);
    assert_eq!(cg.key(), gg.key());
}
