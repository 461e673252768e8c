//! Generation speed: new bytes per second of `nn_mini::gpt::generate_batch` (the key-value
//! cache, one row per request per step) against the loop it replaced, nanoGPT's
//! `generate` without a cache (the whole cropped context forward for every new byte),
//! at batch 1 and a larger batch, on a random-init GPT of the shape given.
//!
//! ```sh
//! cargo bench --bench generate_bench -- --threads 1 --shape 6,6,384,256 --new 256 --batch 32
//! ```
//!
//! A plain harness, as `train_step`: each line is one measurement, the median of
//! `--rounds`.

use std::time::Instant;

use clap::Parser;
use nn_mini::gpt::{generate_batch, GenerationRequest, Gpt, GptConfig, SamplingParams};
use nn_mini::Module;
use rng_gen::{Generator, Key};
use tensor_core::{DType, Device, Tensor};

#[path = "../examples/common/allocator.rs"]
mod allocator;

/// Generation with and without the key-value cache, timed (bytes/s, median of rounds).
#[derive(Parser, Debug)]
struct Args {
    /// Threads of rayon's global pool.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// LAYERS,HEADS,WIDTH,BLOCK of the model.
    #[arg(long, value_delimiter = ',', default_value = "4,4,128,64")]
    shape: Vec<usize>,
    /// New bytes per request.
    #[arg(long, default_value_t = 256)]
    new: usize,
    /// Requests of the batched measurement.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Timed rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// `cargo bench` passes `--bench`; accepted and ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// nanoGPT's `generate`: the last `block` bytes forward for every new byte, greedy.
fn without_cache(model: &mut Gpt, prompt: &[u8], new: usize) -> Vec<u8> {
    let block = model.config().block_size;
    let mut tokens = prompt.to_vec();
    for _ in 0..new {
        let context = &tokens[tokens.len().saturating_sub(block)..];
        let input = context.iter().map(|&b| i64::from(b)).collect();
        let input = Tensor::from_vec(input, &[1, context.len()], Device::Cpu).unwrap();
        let logits = model.forward(&input, false).unwrap();
        let last = logits
            .narrow(1, context.len() - 1, 1)
            .unwrap()
            .argmax(2)
            .unwrap();
        tokens.push(last.to_dtype(DType::I64).unwrap().to_vec::<i64>().unwrap()[0] as u8);
    }
    tokens
}

fn main() {
    allocator::keep_freed_memory();
    let args = Args::parse();
    rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads)
        .build_global()
        .unwrap();
    let [layers, heads, width, block] = args.shape[..] else {
        panic!("--shape takes LAYERS,HEADS,WIDTH,BLOCK");
    };
    let config = GptConfig {
        n_layer: layers,
        n_head: heads,
        n_embd: width,
        block_size: block,
        dropout: 0.0,
        ..GptConfig::default()
    };
    let init = Generator::from_key(Device::Cpu, Key::new(1));
    let mut model = Gpt::new(&config, &init, &init).unwrap();
    let request = |seed| GenerationRequest {
        prompt: b"\n".to_vec(),
        seed,
        sampling: SamplingParams::default(),
        max_tokens: args.new,
        stop: None,
    };
    let mut time = |f: &mut dyn FnMut(&mut Gpt) -> usize| {
        let rates = (0..args.rounds)
            .map(|_| {
                let start = Instant::now();
                let bytes = f(&mut model);
                bytes as f64 / start.elapsed().as_secs_f64()
            })
            .collect();
        median(rates)
    };
    let shape = format!("{layers},{heads},{width},{block}");
    let line = |what: &str, batch: usize, rate: f64| {
        println!(
            "{what} threads={} shape={shape} new={} batch={batch}: {rate:.1} bytes/s",
            args.threads, args.new
        );
    };
    let no_cache = time(&mut |m| without_cache(m, b"\n", args.new).len() - 1);
    line("ditto-no-cache", 1, no_cache);
    for batch in [1, args.batch] {
        let cached = time(&mut |m| {
            let mut bytes = 0;
            let requests = (0..batch as u64).map(request).collect();
            generate_batch(m, requests, batch, |_, text| {
                bytes += text.len();
                Ok(())
            })
            .unwrap();
            bytes
        });
        line("ditto-cached", batch, cached);
    }
}
