//! The downstream op gets ditto's guarantees: the CUDA body computes what the CPU body
//! computes (host parity), the CPU result does not depend on the thread count, and the
//! generator advances by `ceil(n / 4)` blocks.

use ditto::prelude::*;
use ditto::rng_gen::{Generator, Key};
use gumbel_noise::{gumbel, host};

fn at(seed: u64, offset: u64) -> Generator {
    Generator::from_key(Device::Cpu, Key { seed, offset })
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn the_cuda_body_on_the_host_matches_the_cpu_op() {
    let keys = [(0, 0), (0xdead_beef, 12_345), (u64::MAX, u64::MAX - 2)];
    for (seed, offset) in keys {
        for n in [1usize, 3, 4, 5, 127, 100_003] {
            for (loc, scale) in [(0.0, 1.0), (-2.5, 0.3), (1e3, 7.0)] {
                let cpu = gumbel(&[n], loc, scale, Device::Cpu, Some(&at(seed, offset))).unwrap();
                let on_host = host::gumbel(seed, offset, n, loc, scale);
                assert_eq!(
                    bits(&cpu.to_vec::<f32>().unwrap()),
                    bits(&on_host),
                    "seed {seed:#x} offset {offset} n {n} loc {loc} scale {scale}"
                );
            }
        }
    }
}

#[test]
fn thread_count_does_not_change_a_bit() {
    let runs: Vec<Vec<u32>> = [1, 2, 4]
        .iter()
        .map(|&t| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .unwrap();
            pool.install(|| {
                let x = gumbel(&[300_001], 0.0, 1.0, Device::Cpu, Some(&at(9, 1))).unwrap();
                bits(&x.to_vec::<f32>().unwrap())
            })
        })
        .collect();
    assert!(runs.iter().all(|r| *r == runs[0]));
}

#[test]
fn the_generator_advances_by_ceil_n_over_4_blocks() {
    for n in [0usize, 1, 4, 5, 9] {
        let g = at(1, u64::MAX);
        gumbel(&[n], 0.0, 1.0, Device::Cpu, Some(&g)).unwrap();
        assert_eq!(g.offset(), u64::MAX.wrapping_add(n.div_ceil(4) as u64));
    }
}
