//! The CUDA headers (`crates/kernels/cuda/*.cuh`), compiled for the host, against the Rust
//! engine, bit for bit (docs/contract.md §11). No GPU needed: `host_parity::random` (the `host-parity` test crate) runs
//! the very `__host__ __device__` functions the kernels call, including each kernel's
//! per-block body, so a pass here means the GPU computes what the CPU samplers compute as
//! long as the device does IEEE arithmetic the way the host does (checked by the GPU
//! tests in the workspace's `tests/integration/gpu_random.rs`).
//!
//! Inputs are many pseudo-random values (a fixed SplitMix64 stream, so failures repeat)
//! plus the edge cases that broke other implementations: 0, all ones, NaN payloads,
//! subnormals, ties in rounding, offsets that wrap around 2^64.

use half::{bf16, f16};
use host_parity::random as cuda;
use rng_gen::stream::convert as rust;
use rng_gen::stream::f32math;
use rng_gen::stream::philox::block_words;
use rng_gen::{increment_for, RandomOp};
use rng_gen::{Generator, Key};
use tensor_core::{DType, Device, Element, Tensor};

/// SplitMix64: a fixed, dependency-free source of test inputs.
struct Inputs(u64);

impl Inputs {
    fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn u32(&mut self) -> u32 {
        (self.u64() >> 32) as u32
    }
    /// Random words, with the edge words first.
    fn words(&mut self, count: usize) -> Vec<u32> {
        let edges = [
            0,
            1,
            0x7F_FFFF,
            0x80_0000,
            0xFF_FFFF,
            0x100_0000,
            0x7FFF_FFFF,
            0x8000_0000,
            u32::MAX - 1,
            u32::MAX,
        ];
        edges
            .into_iter()
            .chain((0..count).map(|_| self.u32()))
            .collect()
    }
}

/// Floats whose bits are random, plus special values: every class of f32.
fn special_and_random_floats(inputs: &mut Inputs, count: usize) -> Vec<f32> {
    let specials = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        0.25,
        1.5,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x8000_0001),
        f32::from_bits(0x007F_FFFF),
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7F80_0001),
        f32::from_bits(0xFFBF_FFFF),
        65504.0,
        65520.0,
        65519.99,
        1e-8,
        5.96e-8,
        2.98e-8,
        3.4e38,
        8_388_608.0,
        1_073_741_824.0,
        1e30,
        -1e30,
        0.1,
        1.0 / 3.0,
        0.999_999_94,
        1.000_000_1,
        1_048_576.5,
        1_048_577.5,
    ];
    specials
        .into_iter()
        .chain((0..count).map(|_| f32::from_bits(inputs.u32())))
        .collect()
}

/// Two f32 results of arithmetic on arbitrary bit patterns: equal bits, or both NaN.
/// Which input NaN's payload an operation passes on is the hardware's and the
/// optimiser's choice (it may commute an add), not the contract's (docs/contract.md §1,
/// "NaN bits"), so only NaN-ness is compared there.
fn assert_f32_eq(what: &str, input: impl std::fmt::Debug, cuda: f32, rust: f32) {
    if cuda.is_nan() && rust.is_nan() {
        return;
    }
    assert_bits_eq(what, input, cuda.to_bits().into(), rust.to_bits().into());
}

fn assert_bits_eq(what: &str, input: impl std::fmt::Debug, cuda: u64, rust: u64) {
    assert_eq!(
        cuda, rust,
        "{what}({input:?}): CUDA header gives {cuda:#x}, Rust gives {rust:#x}"
    );
}

#[test]
fn philox_rounds_match() {
    let mut inputs = Inputs(1);
    let kats = [
        ([0u32; 4], [0u32; 2]),
        ([u32::MAX; 4], [u32::MAX; 2]),
        (
            [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
            [0xa409_3822, 0x299f_31d0],
        ),
    ];
    assert_eq!(
        cuda::philox4x32_10(kats[0].0, kats[0].1),
        [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]
    );
    let random = (0..200_000).map(|_| {
        (
            [inputs.u32(), inputs.u32(), inputs.u32(), inputs.u32()],
            [inputs.u32(), inputs.u32()],
        )
    });
    for (counter, key) in kats.into_iter().chain(random) {
        assert_eq!(
            cuda::philox4x32_10(counter, key),
            rng_gen::philox4x32_10(counter, key),
            "{counter:x?} {key:x?}"
        );
    }
    for block in [
        0,
        1,
        u64::from(u32::MAX),
        1 << 32,
        u64::MAX - 1,
        u64::MAX,
        inputs.u64(),
    ] {
        let seed = inputs.u64();
        assert_eq!(
            cuda::block_words(seed, block),
            block_words(seed, block),
            "seed {seed:#x} block {block:#x}"
        );
    }
}

#[test]
fn word_conversions_match() {
    let mut inputs = Inputs(2);
    let probabilities = [
        0.0,
        1.0,
        0.5,
        0.3,
        f32::from_bits(1),
        0.999_999_94,
        1.0 / 16_777_216.0,
    ];
    for w in inputs.words(1_000_000) {
        assert_bits_eq(
            "uniform_f32",
            w,
            cuda::uniform_f32(w).to_bits().into(),
            rust::uniform_f32(w).to_bits().into(),
        );
        assert_bits_eq(
            "uniform_f16",
            w,
            cuda::uniform_f16(w).into(),
            rust::uniform_f16(w).to_bits().into(),
        );
        assert_bits_eq(
            "uniform_bf16",
            w,
            cuda::uniform_bf16(w).into(),
            rust::uniform_bf16(w).to_bits().into(),
        );
        let open = (cuda::open_uniform_f32(w), rust::open_uniform_f32(w));
        assert_bits_eq(
            "open_uniform_f32",
            w,
            open.0.to_bits().into(),
            open.1.to_bits().into(),
        );
        let w1 = inputs.u32();
        assert_bits_eq(
            "uniform_f64",
            (w, w1),
            cuda::uniform_f64(w, w1).to_bits(),
            rust::uniform_f64(w, w1).to_bits(),
        );
        let range = match w % 4 {
            0 => 1,
            1 => u64::MAX,
            2 => u64::from(inputs.u32()),
            _ => inputs.u64(),
        };
        assert_bits_eq(
            "below",
            (w, w1, range),
            cuda::below(w, w1, range),
            rust::below(w, w1, range),
        );
        let p = if w % 3 == 0 {
            probabilities[(w as usize / 3) % probabilities.len()]
        } else {
            rust::uniform_f32(w1)
        };
        assert_eq!(
            cuda::bernoulli(w, p),
            rust::bernoulli(w, p),
            "bernoulli({w:#x}, {p})"
        );
        assert_eq!(
            cuda::dropout_keep(w, p),
            rust::dropout_keep(w, p),
            "dropout_keep({w:#x}, {p})"
        );
    }
    for _ in 0..1_000_000 {
        let (u, a, b) = (
            f32::from_bits(inputs.u32()),
            f32::from_bits(inputs.u32()),
            f32::from_bits(inputs.u32()),
        );
        let su = (
            cuda::scale_uniform_f32(u, a, b),
            rust::scale_uniform_f32(u, a, b),
        );
        assert_f32_eq("scale_uniform_f32", (u, a, b), su.0, su.1);
        let sn = (
            cuda::scale_normal_f32(u, a, b),
            rust::scale_normal_f32(u, a, b),
        );
        assert_f32_eq("scale_normal_f32", (u, a, b), sn.0, sn.1);
    }
}

#[test]
fn half_precision_rounding_matches_the_half_crate() {
    let mut inputs = Inputs(3);
    // Ties: values exactly halfway between two f16 / bf16 numbers, both parities.
    let ties = (0..4096u32).flat_map(|m| {
        [
            f32::from_bits(0x3F80_0000 | m << 12 | 0x1000),
            f32::from_bits(0x3F80_8000 | m << 16),
        ]
    });
    for x in special_and_random_floats(&mut inputs, 1_000_000)
        .into_iter()
        .chain(ties)
    {
        assert_bits_eq(
            "f32_to_f16",
            x,
            cuda::f32_to_f16(x).into(),
            f16::from_f32(x).to_bits().into(),
        );
        assert_bits_eq(
            "f32_to_bf16",
            x,
            cuda::f32_to_bf16(x).into(),
            bf16::from_f32(x).to_bits().into(),
        );
    }
    for h in 0..=u16::MAX {
        let back = (cuda::f16_to_f32(h), f16::from_bits(h).to_f32());
        assert_bits_eq(
            "f16_to_f32",
            h,
            back.0.to_bits().into(),
            back.1.to_bits().into(),
        );
        let back = (cuda::bf16_to_f32(h), bf16::from_bits(h).to_f32());
        assert_bits_eq(
            "bf16_to_f32",
            h,
            back.0.to_bits().into(),
            back.1.to_bits().into(),
        );
    }
}

#[test]
fn ln_and_sincospi_match() {
    let mut inputs = Inputs(4);
    let mut xs = special_and_random_floats(&mut inputs, 1 << 20);
    // What the normal sampler feeds them: v(w) in (0, 1] and 2 v(w) in (0, 2].
    xs.extend(
        inputs
            .words(1 << 20)
            .into_iter()
            .map(rust::open_uniform_f32),
    );
    xs.extend((0..1 << 20).map(|_| 2.0 * rust::open_uniform_f32(inputs.u32())));
    // Near the quadrant boundaries of sincospi and the sqrt(2) split of ln.
    for k in -64..=64 {
        let base = k as f32 * 0.25;
        xs.extend((1..64).flat_map(|i| {
            [
                f32::from_bits(base.to_bits() + i),
                f32::from_bits(base.to_bits().wrapping_sub(i)),
            ]
        }));
    }
    xs.extend((0..4096).map(|i| f32::from_bits(0x3F35_04F3 - 2048 + i)));
    let ln_cuda = cuda::ln_many(&xs);
    let (sin_cuda, cos_cuda) = cuda::sincospi_many(&xs);
    for (i, &x) in xs.iter().enumerate() {
        assert_bits_eq(
            "ln",
            x,
            ln_cuda[i].to_bits().into(),
            f32math::ln(x).to_bits().into(),
        );
        let (s, c) = f32math::sincospi(x);
        assert_bits_eq(
            "sincospi.sin",
            x,
            sin_cuda[i].to_bits().into(),
            s.to_bits().into(),
        );
        assert_bits_eq(
            "sincospi.cos",
            x,
            cos_cuda[i].to_bits().into(),
            c.to_bits().into(),
        );
    }
    // The per-value entry points are the same code as the bulk ones.
    assert_eq!(cuda::ln(0.5).to_bits(), f32math::ln(0.5).to_bits());
    assert_eq!(cuda::sincospi(0.3), f32math::sincospi(0.3));
}

#[test]
fn box_muller_matches() {
    let mut inputs = Inputs(5);
    let words = inputs.words(1 << 20);
    for pair in words.windows(2).step_by(2).chain([
        [0, 0].as_slice(),
        &[u32::MAX, u32::MAX],
        &[0, u32::MAX],
    ]) {
        let (cz0, cz1) = cuda::box_muller(pair[0], pair[1]);
        let (rz0, rz1) = rust::box_muller(pair[0], pair[1]);
        assert_bits_eq(
            "box_muller.0",
            pair,
            cz0.to_bits().into(),
            rz0.to_bits().into(),
        );
        assert_bits_eq(
            "box_muller.1",
            pair,
            cz1.to_bits().into(),
            rz1.to_bits().into(),
        );
    }
}

// ---- whole ops: kernel block bodies vs rng-gen's CPU samplers ----------------------------

const SIZES: [usize; 7] = [1, 3, 4, 5, 33, 1000, (1 << 16) + 3];

/// Keys to test each op at: random ones and ones whose blocks wrap past 2^64.
fn keys() -> Vec<Key> {
    let mut inputs = Inputs(6);
    vec![
        Key { seed: 0, offset: 0 },
        Key {
            seed: inputs.u64(),
            offset: inputs.u64(),
        },
        Key {
            seed: inputs.u64(),
            offset: u64::MAX,
        },
        Key {
            seed: u64::MAX,
            offset: u64::MAX - 2,
        },
        Key {
            seed: 0x1234_5678_9abc_def0,
            offset: 7,
        },
    ]
}

/// Runs a CPU op on a fresh generator at `key`, checks the generator moved by exactly
/// `increment_for(op, dtype, n)` blocks (what the CUDA path reserves), returns the values.
fn cpu<T: Element>(
    key: Key,
    op: RandomOp,
    dtype: DType,
    n: usize,
    f: impl FnOnce(&Generator) -> Tensor,
) -> Vec<T> {
    let generator = Generator::from_key(Device::Cpu, key);
    let tensor = f(&generator);
    assert_eq!(
        generator.offset(),
        key.offset.wrapping_add(increment_for(op, dtype, n as u64)),
        "{op:?} {dtype} n={n}"
    );
    tensor
        .to_vec::<T>()
        .expect("CPU tensor of the dtype asked for")
}

/// Bitwise equality of two element vectors, with the first difference in the message.
fn same<T: Copy + std::fmt::Debug>(
    what: &str,
    key: Key,
    cuda: &[T],
    cpu: &[T],
    bits: impl Fn(T) -> u64,
) {
    assert_eq!(cuda.len(), cpu.len());
    if let Some(i) = (0..cuda.len()).find(|&i| bits(cuda[i]) != bits(cpu[i])) {
        panic!(
            "{what} {key:?} n={}: element {i}: CUDA block body {:?}, CPU sampler {:?}",
            cuda.len(),
            cuda[i],
            cpu[i]
        );
    }
}

#[test]
fn uniform_blocks_match_the_cpu_sampler() {
    for key in keys() {
        for n in SIZES {
            for (low, high) in [(0.0, 1.0), (-3.5, 2.25), (1e-3, 1e3)] {
                let run = |dtype| {
                    move |g: &Generator| {
                        rng_gen::uniform(&[n], low, high, dtype, Device::Cpu, Some(g)).unwrap()
                    }
                };
                let (lo, hi) = (low as f32, high as f32);
                let c = cpu::<f32>(key, RandomOp::Uniform, DType::F32, n, run(DType::F32));
                same(
                    "uniform f32",
                    key,
                    &cuda::uniform::<f32>(key.seed, key.offset, n, lo, hi),
                    &c,
                    |v| v.to_bits().into(),
                );
                let c = cpu::<f16>(key, RandomOp::Uniform, DType::F16, n, run(DType::F16));
                same(
                    "uniform f16",
                    key,
                    &cuda::uniform::<f16>(key.seed, key.offset, n, lo, hi),
                    &c,
                    |v| v.to_bits().into(),
                );
                let c = cpu::<bf16>(key, RandomOp::Uniform, DType::BF16, n, run(DType::BF16));
                same(
                    "uniform bf16",
                    key,
                    &cuda::uniform::<bf16>(key.seed, key.offset, n, lo, hi),
                    &c,
                    |v| v.to_bits().into(),
                );
                let c = cpu::<f64>(key, RandomOp::Uniform, DType::F64, n, run(DType::F64));
                same(
                    "uniform f64",
                    key,
                    &cuda::uniform_f64_op(key.seed, key.offset, n, low, high),
                    &c,
                    f64::to_bits,
                );
            }
            let c = cpu::<f32>(key, RandomOp::Uniform, DType::F32, n, |g| {
                rng_gen::rand(&[n], DType::F32, Device::Cpu, Some(g)).unwrap()
            });
            same(
                "rand f32",
                key,
                &cuda::uniform::<f32>(key.seed, key.offset, n, 0.0, 1.0),
                &c,
                |v| v.to_bits().into(),
            );
        }
    }
}

#[test]
fn normal_blocks_match_the_cpu_sampler() {
    for key in keys() {
        for n in SIZES {
            for (mean, std) in [(0.0, 1.0), (2.5, 0.75), (-1e4, 3e3)] {
                let run = |dtype| {
                    move |g: &Generator| {
                        rng_gen::normal(&[n], mean, std, dtype, Device::Cpu, Some(g)).unwrap()
                    }
                };
                let (m, s) = (mean as f32, std as f32);
                let c = cpu::<f32>(key, RandomOp::Normal, DType::F32, n, run(DType::F32));
                same(
                    "normal f32",
                    key,
                    &cuda::normal::<f32>(key.seed, key.offset, n, m, s),
                    &c,
                    |v| v.to_bits().into(),
                );
                let c = cpu::<f16>(key, RandomOp::Normal, DType::F16, n, run(DType::F16));
                same(
                    "normal f16",
                    key,
                    &cuda::normal::<f16>(key.seed, key.offset, n, m, s),
                    &c,
                    |v| v.to_bits().into(),
                );
                let c = cpu::<bf16>(key, RandomOp::Normal, DType::BF16, n, run(DType::BF16));
                same(
                    "normal bf16",
                    key,
                    &cuda::normal::<bf16>(key.seed, key.offset, n, m, s),
                    &c,
                    |v| v.to_bits().into(),
                );
            }
        }
    }
}

#[test]
fn bits_bernoulli_and_randint_blocks_match_the_cpu_samplers() {
    for key in keys() {
        for n in SIZES {
            let c = cpu::<u32>(key, RandomOp::Bits, DType::U32, n, |g| {
                rng_gen::bits(&[n], Device::Cpu, Some(g)).unwrap()
            });
            same(
                "bits",
                key,
                &cuda::bits(key.seed, key.offset, n),
                &c,
                u64::from,
            );
            for p in [0.0, 0.3, 1.0] {
                let run = |dtype| {
                    move |g: &Generator| {
                        rng_gen::bernoulli(&[n], p, dtype, Device::Cpu, Some(g)).unwrap()
                    }
                };
                let p32 = p as f32;
                let c = cpu::<f32>(key, RandomOp::Bernoulli, DType::F32, n, run(DType::F32));
                same(
                    "bernoulli f32",
                    key,
                    &cuda::bernoulli_op::<f32>(key.seed, key.offset, n, p32),
                    &c,
                    |v| v.to_bits().into(),
                );
                let c = cpu::<f16>(key, RandomOp::Bernoulli, DType::F16, n, run(DType::F16));
                same(
                    "bernoulli f16",
                    key,
                    &cuda::bernoulli_op::<f16>(key.seed, key.offset, n, p32),
                    &c,
                    |v| v.to_bits().into(),
                );
                let c = cpu::<bf16>(key, RandomOp::Bernoulli, DType::BF16, n, run(DType::BF16));
                same(
                    "bernoulli bf16",
                    key,
                    &cuda::bernoulli_op::<bf16>(key.seed, key.offset, n, p32),
                    &c,
                    |v| v.to_bits().into(),
                );
                let c = cpu::<f64>(key, RandomOp::Bernoulli, DType::F64, n, run(DType::F64));
                same(
                    "bernoulli f64",
                    key,
                    &cuda::bernoulli_op::<f64>(key.seed, key.offset, n, p32),
                    &c,
                    f64::to_bits,
                );
                let bytes = cuda::bernoulli_u8(key.seed, key.offset, n, p32);
                let c = cpu::<u8>(key, RandomOp::Bernoulli, DType::U8, n, run(DType::U8));
                same("bernoulli u8", key, &bytes, &c, u64::from);
                let c: Vec<u8> =
                    cpu::<bool>(key, RandomOp::Bernoulli, DType::Bool, n, run(DType::Bool))
                        .into_iter()
                        .map(u8::from)
                        .collect();
                same("bernoulli bool", key, &bytes, &c, u64::from);
            }
            for (low, high) in [
                (-5i64, 17i64),
                (i64::MIN, i64::MAX),
                (0, 1),
                (1 << 40, (1 << 40) + 3),
            ] {
                let range = (i128::from(high) - i128::from(low)) as u64;
                let c = cpu::<i64>(key, RandomOp::Randint, DType::I64, n, |g| {
                    rng_gen::randint(low, high, &[n], Device::Cpu, Some(g)).unwrap()
                });
                same(
                    "randint",
                    key,
                    &cuda::randint(key.seed, key.offset, n, low, range),
                    &c,
                    |v| v as u64,
                );
            }
        }
    }
}

/// Dropout forward (with and without the packed mask) and both backward paths, for one
/// element type, against rng-gen's CPU dropout.
fn dropout_matches<T: cuda::ElementwiseFloat + Element + std::fmt::Debug>(
    bits: impl Fn(T) -> u64 + Copy,
) {
    let mut inputs = Inputs(7);
    for key in keys() {
        for n in SIZES {
            let x_values: Vec<T> = (0..n)
                .map(|_| T::from_f64(f64::from(inputs.u32() as i32) / 1e6))
                .collect();
            let x = Tensor::from_vec(x_values.clone(), &[n], Device::Cpu).unwrap();
            let grad_values: Vec<T> = (0..n).map(|i| T::from_f64(i as f64 * 0.37 - 5.0)).collect();
            let grad = Tensor::from_vec(grad_values.clone(), &[n], Device::Cpu).unwrap();
            for p in [0.3, 0.9, 1.0] {
                let generator = Generator::from_key(Device::Cpu, key);
                let (y, state) = rng_gen::dropout_with_mask(&x, p, true, Some(&generator)).unwrap();
                assert_eq!(state.key, key);
                let scale = state.scale;
                let (cuda_y, cuda_mask) =
                    cuda::dropout(key.seed, key.offset, p as f32, scale, &x_values, true);
                same(
                    "dropout y (mask kernel)",
                    key,
                    &cuda_y,
                    &y.to_vec::<T>().unwrap(),
                    bits,
                );
                let cpu_mask = state
                    .packed_mask
                    .as_ref()
                    .expect("asked for the mask")
                    .words()
                    .unwrap();
                assert_eq!(
                    cuda_mask.as_ref(),
                    Some(&cpu_mask),
                    "packed mask {key:?} n={n} p={p}"
                );
                let (cuda_y_plain, none) =
                    cuda::dropout(key.seed, key.offset, p as f32, scale, &x_values, false);
                assert!(none.is_none());
                same("dropout y (no mask)", key, &cuda_y_plain, &cuda_y, bits);

                let cpu_back = rng_gen::dropout_backward(&grad, &state)
                    .unwrap()
                    .to_vec::<T>()
                    .unwrap();
                let from_mask = cuda::dropout_backward_mask(scale, &cpu_mask, &grad_values);
                same("dropout backward (mask)", key, &from_mask, &cpu_back, bits);
                let (regenerated, _) =
                    cuda::dropout(key.seed, key.offset, p as f32, scale, &grad_values, false);
                same(
                    "dropout backward (regenerated)",
                    key,
                    &regenerated,
                    &cpu_back,
                    bits,
                );
            }
        }
    }
}

#[test]
fn dropout_blocks_match_the_cpu_dropout() {
    dropout_matches::<f32>(|v| v.to_bits().into());
    dropout_matches::<f16>(|v| v.to_bits().into());
    dropout_matches::<bf16>(|v| v.to_bits().into());
    dropout_matches::<f64>(f64::to_bits);
}

#[test]
fn every_launch_order_gives_the_same_elements() {
    // The kernels' grid-stride loops visit blocks in an order set by the launch; the
    // block bodies write disjoint elements, so any order gives the same tensor.
    let n = 1000;
    let reference = cuda::normal::<f32>(3, 5, n, 0.0, 1.0);
    for threads in [1, 2, 32, 250, 251, 4096] {
        let mut out = vec![0f32; n];
        for b in cuda::grid_stride_order(cuda::blocks_for(n as u64, 1), threads) {
            cuda::normal_block(3, 5, b, 0.0, 1.0, &mut out);
        }
        same(
            "normal by launch order",
            Key { seed: 3, offset: 5 },
            &out,
            &reference,
            |v| v.to_bits().into(),
        );
    }
}
