//! Data parallel costs: a training step in fast vs world-size-invariant mode, and the
//! bandwidth of the collectives, on the threads backend (steps at 1, 2, 3 and 4 ranks,
//! collectives at 2, 3 and 4) or over MPI.
//!
//! ```text
//! cargo bench --bench distributed_bench                       # threads, 1 to 4 ranks
//! cargo bench --bench distributed_bench -- --portable          # portable arithmetic
//! cargo bench --bench distributed_bench -- --steps-only        # no collectives table
//! cargo bench --features mpi --bench distributed_bench --no-run
//! mpirun --allow-run-as-root --oversubscribe -np 4 target/release/deps/distributed_bench-<hash> mpi
//! cargo bench --features gloo --bench distributed_bench --no-run
//! bash scripts/launch_local.sh 4 -- target/release/deps/distributed_bench-<hash> gloo
//! ```
//!
//! Not criterion: every rank must make the same calls in the same order (a collective
//! waits for all ranks), and criterion picks its iteration counts per process. So this
//! is a plain harness with fixed counts: modes (and collectives) are interleaved round by
//! round, rank 0 times each round after a barrier, and the medians over the rounds are
//! printed as markdown rows for `benches/RESULTS.md`, with the machine and the load
//! average before and after. Each rank computes on one thread (rayon's pool is set to
//! one thread), like one process per core. `--portable` turns portable arithmetic on
//! (docs/contract.md §14), under which the invariant mode runs one forward and backward
//! per rank instead of one per micro-shard (`distributed::ddp`).

use std::sync::Arc;
use std::time::Instant;

use distributed::ddp::{fast_sum, invariant_sum, tree};
use distributed::{even_counts, DdpTrainer, ProcessGroup, ReduceMode, ThreadGroup};
use nn_mini::train::{Run, TrainConfig};
use tensor_core::{DType, Device, Tensor};

// mimalloc, as in the training binaries (the file says why): with glibc's malloc, page
// faults from its heap trimming dominate the invariant step.
#[path = "../examples/common/allocator.rs"]
mod allocator;

/// Rounds per measurement (the median is reported).
const ROUNDS: usize = 9;
/// Training steps per round and mode.
const STEPS_PER_ROUND: usize = 10;

fn main() {
    allocator::keep_freed_memory();
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global();
    tensor_core::use_portable_arithmetic(std::env::args().any(|a| a == "--portable"));
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    match args.first().map(String::as_str) {
        Some("mpi") => run_mpi(),
        Some("gloo") => run_gloo(),
        _ => {
            print_machine();
            for world in [1, 2, 3, 4] {
                ThreadGroup::run(world, |pg| {
                    suite(Arc::new(pg));
                    Ok(())
                })
                .unwrap();
            }
            println!("load average after: {}", loadavg());
        }
    }
}

#[cfg(feature = "mpi")]
fn run_mpi() {
    run_group(Arc::new(distributed::MpiGroup::init().unwrap()));
}

/// The suite on one rank of a job of processes (rank 0 prints).
#[cfg_attr(not(any(feature = "mpi", feature = "gloo")), allow(dead_code))]
fn run_group(group: Arc<dyn ProcessGroup>) {
    if group.rank() == 0 {
        print_machine();
    }
    suite(Arc::clone(&group));
    if group.rank() == 0 {
        println!("load average after: {}", loadavg());
    }
}

#[cfg(not(feature = "mpi"))]
fn run_mpi() {
    eprintln!("built without MPI: cargo bench --features mpi --bench distributed_bench --no-run");
    std::process::exit(2);
}

/// One rank of a Gloo job launched torchrun-style (`scripts/launch_local.sh`).
#[cfg(feature = "gloo")]
fn run_gloo() {
    let timeout = std::time::Duration::from_secs(120);
    let group: Arc<dyn ProcessGroup> = Arc::new(distributed::GlooGroup::from_env(timeout).unwrap());
    run_group(group);
}

#[cfg(not(feature = "gloo"))]
fn run_gloo() {
    eprintln!("built without Gloo: cargo bench --features gloo --bench distributed_bench --no-run");
    std::process::exit(2);
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn print_machine() {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "machine: {cpu}, {cores} cores available; load average before: {}",
        loadavg()
    );
}

/// The median of `values`.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Runs `body` once per round on every rank after a barrier; rank 0's wall times.
fn timed(group: &dyn ProcessGroup, mut body: impl FnMut()) -> f64 {
    group.barrier().unwrap();
    let started = Instant::now();
    body();
    group.barrier().unwrap();
    started.elapsed().as_secs_f64()
}

fn suite(group: Arc<dyn ProcessGroup>) {
    let (rank, world) = (group.rank(), group.world_size());
    let backend = group.backend();
    let leader = rank == 0;

    // 1. The demo's training step, fast and invariant mode interleaved. The fast mode
    //    splits the global batch evenly, so at a world size that does not divide the
    //    demo's 128 rows (3) both modes step on 96 (8 micro-shards of 12).
    let demo = TrainConfig::default().batch_size;
    let batch = if demo % world == 0 { demo } else { 96 };
    let config = TrainConfig {
        seed: 7,
        batch_size: batch,
        ..TrainConfig::default()
    };
    let modes = [ReduceMode::Fast, ReduceMode::Invariant { micro_shards: 8 }];
    let mut trainers: Vec<DdpTrainer> = modes
        .iter()
        .map(|&m| DdpTrainer::new(config.clone(), m, Arc::clone(&group)).unwrap())
        .collect();
    let mut times = vec![Vec::new(); modes.len()];
    for _ in 0..ROUNDS {
        for (t, trainer) in trainers.iter_mut().enumerate() {
            let seconds = timed(&*group, || {
                for _ in 0..STEPS_PER_ROUND {
                    trainer.step().unwrap();
                }
            });
            times[t].push(seconds / STEPS_PER_ROUND as f64);
        }
    }
    if leader {
        let fast = median(times[0].clone());
        let inv = median(times[1].clone());
        let arithmetic = match tensor_core::are_portable_arithmetic_enabled() {
            true => "portable",
            false => "default",
        };
        println!("\n| backend | ranks | batch | arithmetic | fast ms/step | invariant ms/step | invariant / fast |");
        println!("|---|---:|---:|---|---:|---:|---:|");
        println!(
            "| {backend} | {world} | {batch} | {arithmetic} | {:.2} | {:.2} | {:.2}x |",
            fast * 1e3,
            inv * 1e3,
            inv / fast
        );
    }
    drop(trainers);
    if world == 1 || std::env::args().any(|a| a == "--steps-only") {
        return;
    }

    // 2. Collectives on f32 buffers, all interleaved per round. Bus bandwidth as in
    //    nccl-tests: bytes * 2(W-1)/W for sums, (W-1)/W for gathers and all-to-all.
    if leader {
        println!("\n| backend | ranks | collective | MiB | median ms | bus GB/s |");
        println!("|---|---:|---|---:|---:|---:|");
    }
    for mib in [1usize, 16] {
        let n = mib * 1024 * 1024 / 4;
        let counts = even_counts(n, world); // n divides by 2 and 4: equal runs
        let input = Tensor::ones(&[n], DType::F32, Device::Cpu).unwrap();
        // The invariant sum takes one partial per subtree this rank holds of the step's
        // 8 micro-shards (two for some ranks of 3).
        let subtrees = tree::subtrees_of_rank(rank, world, 8).len();
        let partials = vec![input.clone(); subtrees];
        let mine = Tensor::ones(&[counts[rank]], DType::F32, Device::Cpu).unwrap();
        let ops: [(&str, f64); 4] = [
            ("all_reduce (fast)", 2.0),
            ("all_to_all + tree + all_gather (invariant)", 2.0),
            ("all_gather", 1.0),
            ("all_to_all", 1.0),
        ];
        let mut times = vec![Vec::new(); ops.len()];
        for _ in 0..ROUNDS {
            for (i, op) in times.iter_mut().enumerate() {
                op.push(timed(&*group, || match i {
                    0 => fast_sum(&*group, &mut input.clone()).unwrap(),
                    1 => drop(invariant_sum(&*group, 8, &partials).unwrap()),
                    // The outputs only give size and dtype (the collectives replace
                    // them), so `input`, of the same size, serves without an allocation.
                    2 => group
                        .all_gather(&mut input.clone(), &mine, &counts)
                        .unwrap(),
                    _ => {
                        let received = vec![counts[rank]; world];
                        let mut out = input.clone();
                        group
                            .all_to_all(&mut out, &input, &received, &counts)
                            .unwrap();
                    }
                }));
            }
        }
        if leader {
            let share = (world - 1) as f64 / world as f64;
            for ((name, factor), t) in ops.iter().zip(times) {
                let t = median(t);
                let bus = (n * 4) as f64 * factor * share / t / 1e9;
                println!(
                    "| {backend} | {world} | {name} | {mib} | {:.2} | {bus:.2} |",
                    t * 1e3
                );
            }
        }
    }
}
