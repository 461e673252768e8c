//! Where a second thread pays, op by op (issue 29 item 1): each CPU op that can fan out
//! on rayon, timed at several sizes on a one-thread and a two-thread pool, alternating
//! call by call, so both see the same machine load. Prints, per op and size, the median
//! time per call on each pool and their ratio; a ratio above 1 is an op that a second
//! thread makes slower, and the size where it falls below 1 is where its fan-out
//! threshold belongs.
//!
//! ```sh
//! cargo bench --bench fan_out -- --sizes 8192,32768,131072,524288 --calls 200
//! ```
//!
//! Why not criterion: the two pools are compared with each other in one run, interleaved
//! (on a shared 2-core machine two separate runs see different loads); the values never
//! depend on the pool (ditto's contract), only the time does.

use std::time::Instant;

// The training binaries' allocator (the file says why), so an op's time here does not
// include glibc handing its heap back to the kernel and faulting it in again.
#[path = "../examples/common/allocator.rs"]
mod allocator;

use clap::Parser;
use rng_gen::{Generator, Key};
use tensor_core::ops::SgdMomentumStep;
use tensor_core::{DType, Device, Tensor};

/// Times each op at each size on a 1-thread and a 2-thread pool, interleaved.
#[derive(Parser, Debug)]
struct Args {
    /// Elements per op (rows of 256 for the row-wise ops).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "4096,16384,32768,65536,262144,1048576"
    )]
    sizes: Vec<usize>,
    /// Timed calls per op, size and pool (after as many untimed ones).
    #[arg(long, default_value_t = 100)]
    calls: usize,
    /// Threads of the wider pool.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// `cargo bench` passes `--bench`; accepted and ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The ops a training step of the MLP runs that can fan out, each as one call on
/// tensors of `n` elements.
/// An op's name and one call of it.
type NamedOp = (&'static str, Box<dyn FnMut() + Send>);

fn ops(n: usize) -> Vec<NamedOp> {
    let generator = Generator::from_key(Device::Cpu, Key::new(9));
    let rows = (n / 256).max(1);
    let x = rng_gen::randn(&[rows, 256], DType::F32, Device::Cpu, Some(&generator)).unwrap();
    let y = rng_gen::randn(&[rows, 256], DType::F32, Device::Cpu, Some(&generator)).unwrap();
    let hyper = SgdMomentumStep {
        lr: 0.05,
        momentum: 0.9,
        dampening: 0.0,
        weight_decay: 0.0,
        nesterov: false,
    };
    let (mut param, mut buffer) = (x.contiguous().unwrap(), y.contiguous().unwrap());
    let mut fill = Tensor::zeros(&[rows, 256], DType::F32, Device::Cpu).unwrap();
    let (g1, g2) = (generator.clone(), generator.clone());
    let (x1, x2, x3, x4, y1) = (x.clone(), x.clone(), x.clone(), x.clone(), y.clone());
    vec![
        (
            "dropout p=0.1 (train)",
            Box::new(move || {
                rng_gen::dropout(&x1, 0.1, true, Some(&g1)).unwrap();
            }),
        ),
        (
            "uniform_",
            Box::new(move || rng_gen::uniform_(&mut fill, 0.0, 1.0, Some(&g2)).unwrap()),
        ),
        (
            "add",
            Box::new(move || {
                x2.add(&y1).unwrap();
            }),
        ),
        (
            "relu",
            Box::new(move || {
                x3.relu().unwrap();
            }),
        ),
        (
            "sum over rows (a bias gradient)",
            Box::new(move || {
                x4.sum_dim(0, false).unwrap();
            }),
        ),
        (
            "sgd_momentum_step_",
            Box::new(move || param.sgd_momentum_step_(&mut buffer, &y, &hyper).unwrap()),
        ),
    ]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    allocator::keep_freed_memory();
    let args = Args::parse();
    let pools = [1, args.threads].map(|n| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .expect("a rayon pool")
    });
    println!(
        "| op | elements | 1 thread µs | {t} threads µs | {t}t / 1t |",
        t = args.threads
    );
    println!("|---|---:|---:|---:|---:|");
    for &n in &args.sizes {
        // Each pool gets its own tensors (and generator), built inside it.
        let mut per_pool: Vec<_> = pools.iter().map(|p| p.install(|| ops(n))).collect();
        for index in 0..per_pool[0].len() {
            let mut times = [Vec::new(), Vec::new()];
            for call in 0..2 * args.calls {
                for (which, pool) in pools.iter().enumerate() {
                    let op = &mut per_pool[which][index].1;
                    // Timed inside the pool: `install`'s own hand-off from this thread
                    // to the pool is not the op's.
                    let micros = pool.install(|| {
                        let start = Instant::now();
                        op();
                        start.elapsed().as_secs_f64() * 1e6
                    });
                    if call >= args.calls {
                        times[which].push(micros);
                    }
                }
            }
            let [one, many] = times.map(median);
            println!(
                "| {} | {} | {one:.1} | {many:.1} | {:.2} |",
                per_pool[0][index].0,
                (n / 256).max(1) * 256,
                many / one
            );
        }
    }
}
