//! Quickstart: seed, draw, save the generator state, restore it, draw again.
//!
//! ```text
//! cargo run --release --example quickstart
//! ```
//!
//! Every random op in ditto is a pure function of the generator's `(seed, offset)` and
//! the op's arguments, so restoring a saved state replays exactly the same numbers, here
//! and on any other device, thread count or machine.

use ditto::prelude::*;
use ditto::rng_gen::{self, fold_in, Generator, Key};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. Seed an explicit generator (like `torch.Generator().manual_seed(42)`).
    let generator = Generator::new(Device::Cpu);
    generator.manual_seed(42);
    println!(
        "seed {}, offset {}",
        generator.initial_seed(),
        generator.offset()
    );

    // 2. Draw. Ten f32 uniforms use ten 32-bit words: three 128-bit Philox blocks.
    let first = rng_gen::rand(&[10], DType::F32, Device::Cpu, Some(&generator))?;
    println!("rand(10)  = {:?}", first.to_vec::<f32>()?);
    println!("offset is now {} (blocks consumed)", generator.offset());

    // 3. Save the state (versioned bytes: what a checkpoint stores).
    let saved = generator.get_state();
    let before = rng_gen::randn(&[6], DType::F32, Device::Cpu, Some(&generator))?;

    // 4. Restore it, on a brand-new generator, and draw again.
    let restored = Generator::new(Device::Cpu);
    restored.set_state(&saved)?;
    let after = rng_gen::randn(&[6], DType::F32, Device::Cpu, Some(&restored))?;

    let (before, after) = (before.to_vec::<f32>()?, after.to_vec::<f32>()?);
    println!("randn(6) before saving the state: {before:?}");
    println!("randn(6) after restoring it:      {after:?}");
    let same = before
        .iter()
        .zip(&after)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    println!("bit-identical: {}", if same { "yes" } else { "no" });

    // 5. Independent substreams come from fold_in, never from `seed + rank`.
    let per_rank: Vec<Key> = (0..3).map(|rank| fold_in(Key::new(42), rank)).collect();
    println!("per-rank keys from seed 42: {per_rank:?}");

    // A bad state is a typed error, not a panic.
    match restored.set_state(&saved[..saved.len() - 1]) {
        Err(error) => println!("truncated state rejected: {error}"),
        Ok(()) => println!("truncated state accepted (unexpected)"),
    }
    if same {
        Ok(())
    } else {
        Err("restored stream differs".into())
    }
}
