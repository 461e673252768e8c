//! The custom random op of `examples/custom_random_op.rs` (Gumbel noise, a downstream
//! style `Sampler` with its own CUDA body) on a CUDA device against the CPU, bit for bit:
//! the extension point gets the same pipeline as ditto's ops (one reservation, the same
//! offsets, in-place writes, typed errors). On a machine without a GPU the CUDA stand-in
//! (host-executed) runs the example's kernel too (scripts/cuda_standin.sh builds
//! `examples/custom_random_op/*.cu`); without either, each test prints why it skipped,
//! unless `REQUIRE_GPU=1`.

use crate::support;

#[path = "../../examples/custom_random_op/gumbel.rs"]
#[allow(dead_code)]
mod gumbel;

use ditto::rng_gen::{Generator, Key};
use ditto::tensor_core::{DType, Device, Tensor};
use support::{assert_same, gpu};

const GPU: Device = Device::Cuda(0);

/// Sizes around a block (4 elements) and a large odd one; offsets at 0, mid-stream and
/// wrapping past 2^64.
#[test]
fn gumbel_on_cuda_matches_the_cpu_and_advances_the_generator_alike() {
    if !gpu() {
        return;
    }
    for n in [1usize, 3, 4, 5, 1000, (1 << 20) + 3] {
        for offset in [0, 12_345, u64::MAX - 1] {
            let key = Key { seed: 77, offset };
            let (g_cpu, g_gpu) = (
                Generator::from_key(Device::Cpu, key),
                Generator::from_key(GPU, key),
            );
            let want = gumbel::gumbel(&[n], 0.25, 1.5, Device::Cpu, Some(&g_cpu)).unwrap();
            let got = gumbel::gumbel(&[n], 0.25, 1.5, GPU, Some(&g_gpu)).unwrap();
            assert_eq!(got.device(), GPU);
            assert_same(&format!("gumbel n={n} offset={offset}"), &got, &want);
            assert_eq!(g_gpu.offset(), g_cpu.offset(), "n={n} offset={offset}");
            assert_eq!(g_gpu.offset(), offset.wrapping_add(n.div_ceil(4) as u64));
        }
    }
}

/// In place on a CUDA tensor: the same values and the same key as the allocating op;
/// a wrong dtype is a typed error that moves no generator.
#[test]
fn gumbel_in_place_on_cuda_matches_the_allocating_op() {
    if !gpu() {
        return;
    }
    let key = Key::new(9);
    let want = gumbel::gumbel(
        &[4099],
        -1.0,
        0.5,
        Device::Cpu,
        Some(&Generator::from_key(Device::Cpu, key)),
    )
    .unwrap();
    let g = Generator::from_key(GPU, key);
    let mut out = Tensor::zeros(&[4099], DType::F32, GPU).unwrap();
    let drew = gumbel::gumbel_(&mut out, -1.0, 0.5, Some(&g)).unwrap();
    assert_eq!(drew, key);
    assert_same("gumbel_ on cuda:0", &out, &want);

    let before = g.offset();
    let mut ints = Tensor::zeros(&[8], DType::I64, GPU).unwrap();
    assert!(gumbel::gumbel_(&mut ints, 0.0, 1.0, Some(&g)).is_err());
    assert_eq!(g.offset(), before);
}
