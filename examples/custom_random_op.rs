//! Writing your own random op: Gumbel noise, on the CPU and (feature `cuda`, with a GPU)
//! on CUDA, through ditto's random-op pipeline. The op lives in
//! `custom_random_op/gumbel.rs` (Rust body) and `custom_random_op/gumbel.cuh` (CUDA
//! body); `docs/custom-random-op.md` explains each piece.
//!
//! Run: `cargo run --release --example custom_random_op`. Its tests (`cargo test
//! --example custom_random_op`) check that the result does not depend on the thread
//! count and that the generator advances as docs/contract.md §7 says.

#[path = "custom_random_op/gumbel.rs"]
mod gumbel;

use ditto::prelude::*;
use ditto::rng_gen::{Generator, Key};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let g = Generator::from_key(Device::Cpu, Key::new(2024));
    let noise = gumbel::gumbel(&[6], 0.0, 1.0, Device::Cpu, Some(&g))?;
    println!("Gumbel(0, 1) on the CPU: {:?}", noise.to_vec::<f32>()?);
    println!(
        "generator offset after 6 words: {} (ceil(6 / 4) blocks)",
        g.offset()
    );
    let mut buffer = Tensor::zeros(&[6], DType::F32, Device::Cpu)?;
    let key = gumbel::gumbel_(&mut buffer, 0.0, 1.0, Some(&g))?;
    println!("in place from {key:?}: {:?}", buffer.to_vec::<f32>()?);

    // Gumbel-max: argmax(logits + noise) samples from softmax(logits).
    let logits = [0.1f32, 2.0, -1.0, 0.5];
    let mut counts = [0usize; 4];
    let draws = 100_000;
    let noise = gumbel::gumbel(&[draws, 4], 0.0, 1.0, Device::Cpu, Some(&g))?;
    for row in noise.to_vec::<f32>()?.chunks_exact(4) {
        let scores = logits.iter().zip(row).map(|(l, n)| l + n);
        let best = scores
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map_or(0, |(i, _)| i);
        counts[best] += 1;
    }
    let total: f32 = logits.iter().map(|l| l.exp()).sum();
    for (i, l) in logits.iter().enumerate() {
        println!(
            "class {i}: sampled {:.4}, softmax {:.4}",
            counts[i] as f32 / draws as f32,
            l.exp() / total
        );
    }

    let cuda = Device::Cuda(0);
    match gumbel::gumbel(
        &[6],
        0.0,
        1.0,
        cuda,
        Some(&Generator::from_key(cuda, Key::new(2024))),
    ) {
        Ok(on_gpu) => {
            let same = on_gpu.to_vec::<f32>()?
                == gumbel::gumbel(
                    &[6],
                    0.0,
                    1.0,
                    Device::Cpu,
                    Some(&Generator::from_key(Device::Cpu, Key::new(2024))),
                )?
                .to_vec::<f32>()?;
            println!(
                "on {cuda}: {:?} (bit-identical to the CPU: {same})",
                on_gpu.to_vec::<f32>()?
            );
        }
        Err(e) => println!("no CUDA run: {e}"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::gumbel::{gumbel, gumbel_, Gumbel};
    use ditto::prelude::*;
    use ditto::rng_gen::{self, Generator, Key, Sampler};

    fn at(seed: u64, offset: u64) -> Generator {
        Generator::from_key(Device::Cpu, Key { seed, offset })
    }

    /// The same bits on 1, 2 and 3 threads, over several chunks of the parallel fill.
    #[test]
    fn thread_count_does_not_change_a_bit() {
        let runs: Vec<Vec<u32>> = [1, 2, 3]
            .iter()
            .map(|&threads| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                pool.install(|| {
                    let t = gumbel(&[100_003], 0.5, 2.0, Device::Cpu, Some(&at(7, 11))).unwrap();
                    t.to_vec::<f32>()
                        .unwrap()
                        .iter()
                        .map(|v| v.to_bits())
                        .collect()
                })
            })
            .collect();
        assert!(runs.iter().all(|r| *r == runs[0]));
    }

    /// One word per element: `ceil(n / 4)` blocks, wrapping modulo 2^64; the next op
    /// starts at the next unused block; element `i` is the body applied to word `i`.
    #[test]
    fn offset_advances_as_the_contract_says() {
        for n in [0usize, 1, 4, 5, 1000] {
            let g = at(3, u64::MAX - 1);
            let t = gumbel(&[n], 0.0, 1.0, Device::Cpu, Some(&g)).unwrap();
            assert_eq!(
                g.offset(),
                (u64::MAX - 1).wrapping_add(n.div_ceil(4) as u64)
            );
            let op = Gumbel {
                loc: 0.0,
                scale: 1.0,
            };
            for (i, &v) in t.to_vec::<f32>().unwrap().iter().enumerate() {
                let word = rng_gen::stream::philox::word_at(3, u64::MAX - 1, i as u64);
                let mut expected = [0f32];
                op.fill_group(i as u64, &[word], &mut expected);
                assert_eq!(v.to_bits(), expected[0].to_bits());
            }
        }
        // In place: the same values and the same consumption.
        let (a, b) = (at(5, 0), at(5, 0));
        let fresh = gumbel(&[777], 1.0, 0.5, Device::Cpu, Some(&a)).unwrap();
        let mut out = Tensor::zeros(&[777], DType::F32, Device::Cpu).unwrap();
        let key = gumbel_(&mut out, 1.0, 0.5, Some(&b)).unwrap();
        assert_eq!(key, Key { seed: 5, offset: 0 });
        assert_eq!(out.to_vec::<f32>().unwrap(), fresh.to_vec::<f32>().unwrap());
        assert_eq!(a.offset(), b.offset());
    }

    #[test]
    fn bad_parameters_are_typed_errors_and_consume_nothing() {
        let g = at(1, 10);
        assert!(gumbel(&[4], 0.0, 0.0, Device::Cpu, Some(&g)).is_err());
        assert!(gumbel(&[4], f32::NAN, 1.0, Device::Cpu, Some(&g)).is_err());
        let mut ints = Tensor::zeros(&[4], DType::I64, Device::Cpu).unwrap();
        assert!(gumbel_(&mut ints, 0.0, 1.0, Some(&g)).is_err());
        assert_eq!(g.offset(), 10);
    }
}
