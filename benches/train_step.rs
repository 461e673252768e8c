//! One training step of an MLP with dropout, SGD with momentum and cross-entropy, at a
//! thread count, model shape and arithmetic you choose; `benches/compare_torch_train.py`
//! is its PyTorch twin (same flags, same output line) and `benches/compare_train_step.sh`
//! runs both side by side, interleaved. Results are in `benches/RESULTS.md`.
//!
//! The step is the same work as the PyTorch script: zero_grad, forward (dropout 0.1 after
//! every hidden layer, on), mean cross-entropy, backward, SGD (lr 0.05, momentum 0.9) on a
//! fixed batch. `--with-loader` times `Trainer::step` instead, which also draws the batch
//! from the data loader (the demo's shape only, as `train_resume` trains it).
//!
//! On a GPU (`--device cuda:0`) the batch lives on the device, the targets are checked
//! once (`ClassTargets`), and each round ends with a synchronisation, as the twin's
//! `torch.cuda.synchronize()`; `--cuda-graph` captures one step after an eager one
//! (the momentum buffers must exist) and replays it (`rng_gen::graph::Graph`, so every
//! replay draws fresh dropout masks), as the twin's `torch.cuda.graph` capture. Unlike
//! `train_resume`'s steps/s, nothing here counts kernel compilation or the data loader.
//!
//! ```sh
//! cargo bench --bench train_step -- --threads 2 --widths 784,1024,1024,10 --batch 256
//! cargo bench --bench train_step -- --portable --rounds 3
//! cargo bench --bench train_step -- --device cuda:0 --cuda-graph
//! cargo bench --bench train_step -- --gpt 4,4,128,64 --batch 12 --dropout 0 --no-bias
//! ```
//!
//! `--gpt LAYERS,HEADS,WIDTH,BLOCK` times `GptTrainer::step` instead (random windows of
//! `data/tinyshakespeare.txt` from the loader, forward, backward, clipping, AdamW), the
//! step `benches/compare_torch_gpt.py` times in PyTorch with the same shape flags.
//!
//! Why not criterion: the comparison is with another process (PyTorch), so both sides
//! print the same line (median steps/s of timed rounds after a warm-up) and the driver
//! script interleaves single rounds of each; criterion's statistics would compare ditto
//! with itself only. The thread count is rayon's global pool, fixed before the first op.

use std::time::{Duration, Instant};

// The training binaries' allocator, so the bench times the step they run. With glibc's
// malloc the demo's step trimmed and refaulted its heap every step at 2 threads (not at 1,
// an accident of which block was freed first): 295k page faults in 4 s against 710, and
// 2 threads ran at 0.7x one (benches/RESULTS.md, issue 29).
#[path = "../examples/common/allocator.rs"]
mod allocator;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use nn_mini::train::{build_mlp, Run, TrainConfig, Trainer};
use nn_mini::{cross_entropy_with, ClassTargets, Module, Sequential};
use nn_mini::{Sgd, SgdConfig};
use rng_gen::{Generator, Key};
use tensor_core::{DType, Device};

/// One training step of an MLP, timed (steps/s, median of rounds).
#[derive(Parser, Debug)]
struct Args {
    /// Threads of rayon's global pool (ditto's CPU ops fan out on it).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Layer widths, input first: `64,256,256,10` is the demo's model.
    #[arg(long, value_delimiter = ',', default_value = "64,256,256,10")]
    widths: Vec<usize>,
    /// Rows per batch.
    #[arg(long, default_value_t = 128)]
    batch: usize,
    /// Portable arithmetic (`use_portable_arithmetic(true)`: the same bits on every CPU
    /// and GPU) instead of the default kernels.
    #[arg(long)]
    portable: bool,
    /// Timed rounds; the median is printed.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Seconds per timed round (and of the warm-up before them).
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Time `Trainer::step` (the data loader included) at the demo's shape instead.
    #[arg(long, conflicts_with_all = ["widths", "batch"])]
    with_loader: bool,
    /// Where the model, batch and step live: `cpu` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    device: Device,
    /// Capture the step as a CUDA graph and time its replays (needs `--device cuda:N`).
    #[arg(long, conflicts_with = "with_loader")]
    cuda_graph: bool,
    /// Run the whole benchmark on one of the pool's threads (`rayon::scope`) instead of
    /// the main thread. From outside the pool every fan-out hands its pieces to the pool
    /// and sleeps until they are done; from inside, the caller runs pieces itself.
    #[arg(long)]
    on_pool: bool,
    /// Time a GPT step of LAYERS,HEADS,WIDTH,BLOCK (context = block) instead, with
    /// `--batch` sequences (train_gpt's defaults otherwise).
    #[arg(long, value_delimiter = ',', num_args = 1, conflicts_with_all = ["widths", "with_loader"])]
    gpt: Option<Vec<usize>>,
    /// With --gpt: the dropout probability.
    #[arg(long, default_value_t = 0.1, requires = "gpt")]
    dropout: f64,
    /// With --gpt: no biases (nanoGPT's bias=False).
    #[arg(long, requires = "gpt")]
    no_bias: bool,
    /// With --gpt: the precision of the products, f32 or bf16 (autocast).
    #[arg(long, default_value = "f32", requires = "gpt")]
    precision: nn_mini::gpt::Precision,
    /// With --gpt: the text the windows come from (a GPU machine running the bundle has
    /// no checkout) [default: the repository's data/tinyshakespeare.txt].
    #[arg(long, requires = "gpt")]
    data: Option<std::path::PathBuf>,
    /// `cargo bench` passes `--bench`; accepted and ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// Waits for the work queued on `device` (a round's steps are only done when the GPU
/// has run them; on the CPU they are done when they return).
fn synchronize(device: Device) {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(ordinal) = device {
        tensor_core::cuda::synchronize(ordinal).expect("synchronising the GPU");
    }
    let _ = device;
}

/// Steps per second of `step` over rounds of `seconds` each, after one round of warm-up.
fn rates(rounds: usize, seconds: f64, device: Device, mut step: impl FnMut()) -> Vec<f64> {
    let round = Duration::from_secs_f64(seconds);
    let mut timed = || {
        synchronize(device);
        let start = Instant::now();
        let mut steps = 0u64;
        while start.elapsed() < round {
            step();
            steps += 1;
        }
        synchronize(device);
        steps as f64 / start.elapsed().as_secs_f64()
    };
    timed(); // warm-up: caches, momentum buffers, rayon's threads
    (0..rounds).map(|_| timed()).collect()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One eager step: zero_grad, forward, cross-entropy, backward, SGD.
fn eager_step(
    model: &mut Sequential,
    sgd: &mut Sgd,
    x: &tensor_core::Tensor,
    y: &ClassTargets,
) -> nn_mini::Result<()> {
    model.zero_grad();
    let logits = model.forward(x, true)?;
    let (_loss, grad) = cross_entropy_with(&logits, y)?;
    model.backward_params(&grad)?;
    sgd.step(model)
}

/// A step to replay: `eager_step` captured once, after one eager step made the momentum
/// buffers (a replay cannot allocate them).
#[cfg(feature = "cuda")]
fn graphed_step(
    device: Device,
    model: &mut Sequential,
    sgd: &mut Sgd,
    x: &tensor_core::Tensor,
    y: &ClassTargets,
) -> rng_gen::graph::Graph {
    eager_step(model, sgd, x, y).unwrap();
    let (graph, ()) =
        rng_gen::graph::Graph::capture(device, || eager_step(model, sgd, x, y)).unwrap();
    graph
}

fn main() {
    allocator::keep_freed_memory();
    let args = Args::parse();
    if args.widths.len() < 2 || args.widths.contains(&0) || args.rounds == 0 || args.threads == 0 {
        Args::command()
            .error(
                ErrorKind::ValueValidation,
                "expected two or more non-zero --widths, --rounds >= 1 and --threads >= 1",
            )
            .exit();
    }
    if args.cuda_graph && (!cfg!(feature = "cuda") || !matches!(args.device, Device::Cuda(_))) {
        Args::command()
            .error(
                ErrorKind::ArgumentConflict,
                "--cuda-graph needs --device cuda:N (and a build with the cuda feature)",
            )
            .exit();
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads)
        .build_global()
        .expect("rayon's global pool is set once, before any op");
    tensor_core::use_portable_arithmetic(args.portable);
    if args.on_pool {
        rayon::scope(|_| run(&args));
    } else {
        run(&args);
    }
}

/// Builds the model and batch, times the step and prints the line.
fn run(args: &Args) {
    let device = args.device;
    let init = Generator::from_key(device, Key::new(1));
    let dropout = Generator::from_key(device, Key::new(2));
    let rates = if let Some(shape) = &args.gpt {
        let mut trainer = gpt_trainer(args, shape);
        // Graphed: every step after the first is one graph launch and AdamW's.
        trainer.set_cuda_graph(args.cuda_graph).unwrap();
        rates(args.rounds, args.seconds, device, || {
            trainer.step().unwrap();
        })
    } else if args.with_loader {
        let mut trainer = Trainer::new(TrainConfig {
            seed: 7,
            device,
            ..TrainConfig::default()
        })
        .unwrap();
        rates(args.rounds, args.seconds, device, || {
            trainer.step().unwrap();
        })
    } else {
        let mut model = build_mlp(&args.widths, 0.1, &init, &dropout).unwrap();
        let mut sgd = Sgd::new(SgdConfig::new(0.05).momentum(0.9)).unwrap();
        let (inputs, classes) = (args.widths[0], *args.widths.last().unwrap());
        let x = rng_gen::randn(&[args.batch, inputs], DType::F32, device, Some(&init)).unwrap();
        // Targets are checked on the host, then uploaded once.
        let labels = Generator::from_key(Device::Cpu, Key::new(3));
        let y = rng_gen::randint(0, classes as i64, &[args.batch], Device::Cpu, Some(&labels));
        let y = ClassTargets::new("train_step", &y.unwrap(), classes, device).unwrap();
        #[cfg(feature = "cuda")]
        if args.cuda_graph {
            let graph = graphed_step(device, &mut model, &mut sgd, &x, &y);
            let rates = rates(args.rounds, args.seconds, device, || {
                graph.replay().unwrap()
            });
            report(args, &rates);
            return;
        }
        rates(args.rounds, args.seconds, device, || {
            eager_step(&mut model, &mut sgd, &x, &y).unwrap();
        })
    };
    report(args, &rates);
}

/// The GPT run of `--gpt`: train_gpt's defaults with the shape, batch, dropout and
/// bias given, on tiny Shakespeare.
fn gpt_trainer(args: &Args, shape: &[usize]) -> nn_mini::gpt::GptTrainer {
    use nn_mini::gpt::{DataSpec, GptConfig, GptTrainConfig, GptTrainer, Text};
    let [layers, heads, width, block] = shape[..] else {
        Args::command()
            .error(
                ErrorKind::ValueValidation,
                "--gpt takes LAYERS,HEADS,WIDTH,BLOCK",
            )
            .exit();
    };
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/data/tinyshakespeare.txt");
    let path = args.data.clone().unwrap_or_else(|| shipped.into());
    let data = DataSpec::of(&path, &Text::read(&path).unwrap());
    let config = GptTrainConfig {
        model: GptConfig {
            n_layer: layers,
            n_head: heads,
            n_embd: width,
            block_size: block,
            dropout: args.dropout,
            bias: !args.no_bias,
            precision: args.precision,
            ..GptConfig::default()
        },
        context: block,
        batch_size: args.batch,
        device: args.device,
        ..GptTrainConfig::new(data)
    };
    GptTrainer::new(config).unwrap()
}

/// Prints the line `benches/compare_torch_train.py` prints for the same flags.
fn report(args: &Args, rates: &[f64]) {
    let what = match (args.gpt.is_some(), args.with_loader, args.portable) {
        (true, _, false) if args.precision == nn_mini::gpt::Precision::Bf16 => "ditto-gpt-bf16",
        (true, _, true) if args.precision == nn_mini::gpt::Precision::Bf16 => {
            "ditto-gpt-bf16-portable"
        }
        (true, _, false) => "ditto-gpt-default",
        (true, _, true) => "ditto-gpt-portable",
        (_, true, false) => "ditto-with-loader",
        (_, true, true) => "ditto-with-loader-portable",
        (_, false, false) => "ditto-default",
        (_, false, true) => "ditto-portable",
    };
    let place = match args.device {
        Device::Cpu => String::new(),
        device => format!(
            " device={device}{}",
            if args.cuda_graph { " graphed" } else { "" }
        ),
    };
    let shape = args.gpt.as_ref().unwrap_or(&args.widths);
    let widths: Vec<String> = shape.iter().map(usize::to_string).collect();
    // The caching allocator's peak (what torch.cuda.max_memory_allocated reports for
    // PyTorch's twin): everything the run held at once, model and optimiser included.
    #[cfg(feature = "cuda")]
    let memory = match args.device {
        Device::Cuda(ordinal) => format!(
            ", peak device memory {:.1} MiB",
            tensor_core::cuda::max_memory_allocated(ordinal) as f64 / (1 << 20) as f64
        ),
        Device::Cpu => String::new(),
    };
    #[cfg(not(feature = "cuda"))]
    let memory = String::new();
    println!(
        "{what}{place} threads={} widths={} batch={}: {:.2} steps/s (median of {} rounds: {:?}){memory}",
        args.threads,
        widths.join("-"),
        args.batch,
        median(rates.to_vec()),
        rates.len(),
        rates.iter().map(|r| r.round()).collect::<Vec<_>>()
    );
}
