//! NCCL collectives that return before they complete (issue 28 items 3 to 5), with ranks
//! in separate processes on the CUDA stand-in's NCCL, in its default mode where a
//! collective's call returns at once and the stream runs it later, and `ncclCommAbort`
//! frees the communicator at once (docs/cuda-standin.md, "NCCL"):
//!
//! - **budget**: a data-parallel step over NCCL, 2 processes, fast and invariant mode,
//!   waits for the device once per step (the loss read) and allocates nothing after
//!   warm-up, counted by the stand-in in each process (`DITTO_CUDA_STANDIN_STATS` with
//!   `%p`, one file per process);
//! - **killed peer**: a peer killed while the survivor's collective is on the stream:
//!   the collective's call returned, the survivor keeps issuing collectives, and it ends
//!   in the typed timeout, with CUDA still usable (an abort that raced a thread inside
//!   NCCL would have poisoned every context);
//! - **queued work**: a healthy rank whose stream holds 3 s of work before a collective
//!   is not aborted at a 1 s timeout (the clock starts when the stream reaches the
//!   collective, not when the host calls it);
//! - **a call that never returns**: one rank's second collective call stalls for ever,
//!   as NCCL >= 2.22's lazy connection to a dead peer does
//!   (`DITTO_CUDA_STANDIN_NCCL_STALL_AT=2`). On ditto's non-blocking communicator the
//!   call answers `ncclInProgress`, so both ranks end in the typed timeout within
//!   seconds (a blocking one would hold that rank inside the call until the stand-in's
//!   safety valve), and no abort races a call.
//!
//! The test re-runs its own binary as the ranks (`harness = false`), each told its role
//! through the environment. Stand-in only: the counts come from it, and world size 2
//! needs two GPUs.
#![cfg(feature = "nccl")]

#[path = "../integration/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distributed::{
    unique_id, DdpTrainer, DistError, NcclGroup, ProcessGroup, ReduceMode, ReduceOp,
};
use nn_mini::train::{Run, TrainConfig};
use tensor_core::{Device, Tensor};
use test_support::wait_with_limit;

const ROLE: &str = "NCCL_ASYNC_ROLE";

/// Steps of the shorter budget run; the longer runs twice as many.
const STEPS: u64 = 6;

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        return child(&role);
    }
    if !support::standin_nccl::standin_nccl_or_skip("nccl_async_processes") {
        return;
    }
    a_killed_peer_ends_in_the_typed_timeout();
    queued_work_does_not_count_against_the_timeout();
    a_call_that_never_returns_ends_in_the_typed_timeout();
    for mode in ["fast", "invariant"] {
        a_step_waits_once_and_allocates_nothing(mode);
    }
    println!("nccl_async_processes: all checks passed");
}

// ---- the parent ----------------------------------------------------------------------

fn hex(id: &[u8; 128]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// Rank `rank` of 2 in a new process with `role`; `env` adds variables.
fn spawn(role: &str, rank: usize, id: &[u8; 128], env: &[(&str, String)]) -> Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .env(ROLE, role)
        .env("RANK", rank.to_string())
        .env("NCCL_ASYNC_ID", hex(id))
        .env("DITTO_CUDA_STANDIN_DEVICES", "2")
        .env("DITTO_CUDA_STANDIN_NCCL_TIMEOUT_S", "120")
        .env_remove("DITTO_CUDA_STANDIN_NCCL_MODE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    command.spawn().unwrap()
}

fn must_succeed(child: Child, what: &str) -> String {
    let (out, err, ok) = wait_with_limit(child, what, Duration::from_secs(300));
    assert!(ok, "{what} failed:\n{out}\n{err}");
    out
}

type Counts = BTreeMap<String, u64>;

/// Both ranks train `steps` steps in `mode`; each rank's call counts, read from the
/// file its `%p` path named.
fn counts_of_run(dir: &Path, mode: &str, steps: u64) -> Vec<Counts> {
    let id = unique_id().unwrap();
    let pattern = dir.join(format!("stats-{mode}-{steps}-%p.json"));
    let env = [
        ("DITTO_CUDA_STANDIN_STATS", pattern.display().to_string()),
        ("NCCL_ASYNC_STEPS", steps.to_string()),
        ("NCCL_ASYNC_MODE", mode.to_string()),
    ];
    let ranks: Vec<Child> = (0..2).map(|r| spawn("train", r, &id, &env)).collect();
    let pids: Vec<u32> = ranks.iter().map(Child::id).collect();
    for (rank, child) in ranks.into_iter().enumerate() {
        must_succeed(child, &format!("{mode}, {steps} steps, rank {rank}"));
    }
    pids.iter()
        .map(|pid| {
            let path = dir.join(format!("stats-{mode}-{steps}-{pid}.json"));
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                panic!(
                    "the stand-in wrote no call counts to {}: {e}",
                    path.display()
                )
            });
            parse_counts(&text)
        })
        .collect()
}

/// The stand-in's flat JSON object of call counts (`{"cuInit": 1, ...}`).
fn parse_counts(text: &str) -> Counts {
    let body = text.trim().trim_start_matches('{').trim_end_matches('}');
    body.split(',')
        .filter(|entry| !entry.trim().is_empty())
        .map(|entry| {
            let (name, count) = entry
                .split_once(':')
                .unwrap_or_else(|| panic!("not a \"name\": count entry: {entry:?}"));
            let count = count
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("not a count: {entry:?}"));
            (name.trim().trim_matches('"').to_string(), count)
        })
        .collect()
}

const WAITS: &[&str] = &[
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
];
const ALLOCATIONS: &[&str] = &[
    "cuMemAlloc_v2",
    "cuMemAllocAsync",
    "cuMemAllocFromPoolAsync",
];

fn a_step_waits_once_and_allocates_nothing(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let short = counts_of_run(dir.path(), mode, STEPS);
    let long = counts_of_run(dir.path(), mode, 2 * STEPS);
    for rank in 0..2 {
        let per_step = |names: &[&str]| {
            names
                .iter()
                .map(|n| {
                    let (a, b) = (short[rank].get(*n), long[rank].get(*n));
                    b.copied()
                        .unwrap_or(0)
                        .saturating_sub(a.copied().unwrap_or(0))
                })
                .sum::<u64>() as f64
                / STEPS as f64
        };
        let collectives = per_step(&["ncclAllReduce", "ncclGroupEnd"]);
        assert!(
            collectives >= 1.0,
            "{mode}, rank {rank}: a step runs collectives: {:?}",
            long[rank]
        );
        let waits = per_step(WAITS);
        assert!(
            waits <= 1.0,
            "{mode}, rank {rank}: {waits} device waits per step, budget 1 (the loss read): \
             short run {:?}, long run {:?}",
            short[rank],
            long[rank]
        );
        let allocations = per_step(ALLOCATIONS);
        assert_eq!(
            allocations, 0.0,
            "{mode}, rank {rank}: driver allocations per step after warm-up: {:?}",
            long[rank]
        );
        println!(
            "{mode}, rank {rank}: {collectives} collectives, {waits} device waits, no allocation per step"
        );
    }
}

fn a_killed_peer_ends_in_the_typed_timeout() {
    let id = unique_id().unwrap();
    let survivor = spawn("survivor", 0, &id, &[]);
    let mut victim = spawn("victim", 1, &id, &[]);
    // The victim joins and does one collective with the survivor, then waits to be
    // killed; the survivor says when its next collective is on the stream.
    let mut out = std::io::BufReader::new(victim.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "warmed up", "the victim's first line");
    // Killed while the survivor's second collective waits for it on the stream (the
    // survivor issued it right after the first, without waiting).
    std::thread::sleep(Duration::from_millis(300));
    victim.kill().unwrap();
    victim.wait().unwrap();
    let started = Instant::now();
    let (out, err, ok) = wait_with_limit(survivor, "the survivor", Duration::from_secs(60));
    assert!(ok, "the survivor crashed or failed:\n{out}\n{err}");
    assert!(
        out.contains("issued before completing")
            && out.contains("timed out: all_reduce #")
            && out.contains("cuda still works"),
        "{out}\n{err}"
    );
    assert!(
        !err.contains("use after free"),
        "an abort raced a call inside NCCL:\n{err}"
    );
    println!(
        "a killed peer: the survivor ended in the typed timeout ({:?} after the kill), CUDA intact",
        started.elapsed()
    );
}

fn queued_work_does_not_count_against_the_timeout() {
    let id = unique_id().unwrap();
    let ranks: Vec<Child> = (0..2).map(|r| spawn("queued", r, &id, &[])).collect();
    for (rank, child) in ranks.into_iter().enumerate() {
        let out = must_succeed(child, &format!("queued work, rank {rank}"));
        assert!(out.contains("summed after the queued work"), "{out}");
    }
    println!("3 s of queued work before a collective with a 1 s timeout: not aborted");
}

fn a_call_that_never_returns_ends_in_the_typed_timeout() {
    let id = unique_id().unwrap();
    let stall = [("DITTO_CUDA_STANDIN_NCCL_STALL_AT", "2".to_string())];
    let ranks = [
        spawn("stalled", 0, &id, &[]),
        spawn("stalled", 1, &id, &stall),
    ];
    let started = Instant::now();
    for (rank, child) in ranks.into_iter().enumerate() {
        let (out, err, ok) = wait_with_limit(child, "a stalled rank", Duration::from_secs(60));
        assert!(ok, "rank {rank} crashed or failed:\n{out}\n{err}");
        assert!(
            out.contains("timed out: all_reduce #1"),
            "rank {rank}:\n{out}\n{err}"
        );
        assert!(
            !err.contains("use after free"),
            "an abort raced a call:\n{err}"
        );
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(20),
        "{took:?}: longer than the timeouts allow"
    );
    println!(
        "a collective call that never returns: both ranks ended in the typed timeout in {took:?}"
    );
}

// ---- the ranks -----------------------------------------------------------------------

fn child(role: &str) {
    let var = |name: &str| std::env::var(name).unwrap();
    let rank: usize = var("RANK").parse().unwrap();
    let text = var("NCCL_ASYNC_ID");
    let mut id = [0u8; 128];
    for (i, byte) in id.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap();
    }
    match role {
        "train" => train(rank, &id),
        "survivor" => survivor(&id),
        "victim" => {
            let pg = NcclGroup::new(rank, 2, rank, &id).unwrap();
            let mut t = ones(&pg);
            pg.all_reduce(&mut t, ReduceOp::Sum).unwrap();
            assert_eq!(t.to_vec::<f32>().unwrap(), [2.0; 4]);
            println!("warmed up");
            // Until the parent kills it.
            let mut line = String::new();
            while std::io::stdin().read_line(&mut line).unwrap_or(0) > 0 {}
        }
        "queued" => queued(rank, &id),
        "stalled" => stalled(rank, &id),
        other => panic!("unknown role {other}"),
    }
}

fn ones(pg: &NcclGroup) -> Tensor {
    Tensor::from_vec(vec![1.0f32; 4], &[4], Device::Cpu)
        .unwrap()
        .to_device(pg.device())
        .unwrap()
}

fn train(rank: usize, id: &[u8; 128]) {
    let steps: u64 = std::env::var("NCCL_ASYNC_STEPS").unwrap().parse().unwrap();
    let mode = match std::env::var("NCCL_ASYNC_MODE").unwrap().as_str() {
        "fast" => ReduceMode::Fast,
        _ => ReduceMode::Invariant { micro_shards: 8 },
    };
    let group: Arc<dyn ProcessGroup> = Arc::new(NcclGroup::new(rank, 2, rank, id).unwrap());
    let config = TrainConfig {
        seed: 3,
        device: Device::Cuda(rank),
        ..TrainConfig::mlp(vec![8, 16, 4], 128, 32)
    };
    let mut trainer = DdpTrainer::new(config, mode, group).unwrap();
    for _ in 0..steps {
        // Reads the loss: the step's one wait for the device.
        let loss = trainer.step().unwrap();
        assert!(loss.is_finite());
    }
}

/// One collective, then a second that rank 1's stand-in stalls: both ranks must end it
/// in the typed timeout (1 s).
fn stalled(rank: usize, id: &[u8; 128]) {
    let pg = NcclGroup::new(rank, 2, rank, id)
        .unwrap()
        .with_timeout(Duration::from_secs(1));
    let mut t = ones(&pg);
    pg.all_reduce(&mut t, ReduceOp::Sum).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), [2.0; 4]);
    let mut second = ones(&pg);
    let error = pg
        .all_reduce(&mut second, ReduceOp::Sum)
        .and_then(|()| pg.check_completed())
        .and_then(|()| second.to_vec::<f32>().map(drop).map_err(DistError::from))
        .and_then(|()| pg.check_completed())
        .expect_err("the second collective cannot complete");
    match error {
        DistError::CollectiveTimeout { op, sequence, .. } => {
            println!("timed out: {op} #{sequence}")
        }
        other => panic!("rank {rank}: expected the typed timeout, got {other}"),
    }
}

fn survivor(id: &[u8; 128]) {
    let timeout = Duration::from_secs(2);
    let pg = NcclGroup::new(0, 2, 0, id).unwrap().with_timeout(timeout);
    let mut t = ones(&pg);
    pg.all_reduce(&mut t, ReduceOp::Sum).unwrap();
    // Issued at once, without waiting for the first: the victim never joins this one.
    let mut pending = ones(&pg);
    pg.all_reduce(&mut pending, ReduceOp::Sum)
        .expect("the collective's call returns once it is enqueued");
    println!("issued before completing");
    assert_eq!(t.to_vec::<f32>().unwrap(), [2.0; 4]);
    // Keeps calling into NCCL while the watchdog's deadline passes: the abort must not
    // race these calls (the stand-in poisons every context if it does).
    let start = Instant::now();
    let error = loop {
        let mut more = ones(&pg);
        if let Err(e) = pg.all_reduce(&mut more, ReduceOp::Sum) {
            break e;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no timeout in 30 s"
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    match &error {
        DistError::CollectiveTimeout { op, sequence, .. }
        | DistError::CollectiveTimeoutNamed { op, sequence, .. } => {
            println!("timed out: {op} #{sequence}");
            assert_eq!(*sequence, 1, "the collective the victim never joined");
        }
        other => panic!("expected the typed timeout, got {other}"),
    }
    assert!(
        matches!(
            pg.all_reduce(&mut t, ReduceOp::Sum),
            Err(DistError::Broken { .. })
        ),
        "later calls report the broken communicator"
    );
    // The process goes on: its device is intact (no context poisoned by a raced abort).
    let check = Tensor::from_vec(vec![3.0f32, 4.0], &[2], Device::Cpu)
        .unwrap()
        .to_device(pg.device())
        .unwrap()
        .mul_scalar(2.0)
        .unwrap();
    assert_eq!(check.to_vec::<f32>().unwrap(), [6.0, 8.0]);
    println!("cuda still works");
}

/// A host function on the stream: the stand-in runs it in stream order, behind the
/// collectives queued before it, as a GPU runs a long kernel.
extern "C" fn three_seconds_of_work(_: *mut std::ffi::c_void) {
    std::thread::sleep(Duration::from_secs(3));
}

fn queued(rank: usize, id: &[u8; 128]) {
    let pg = NcclGroup::new(rank, 2, rank, id)
        .unwrap()
        .with_timeout(Duration::from_secs(1));
    // Warm-up: the caching allocator then holds a buffer of this size, so the
    // collective below allocates without waiting for the stream.
    let mut t = ones(&pg);
    pg.all_reduce(&mut t, ReduceOp::Sum).unwrap();
    let stream = tensor_core::cuda::default_stream(rank).unwrap();
    // SAFETY: the function takes no data and makes no CUDA call.
    unsafe {
        cudarc::driver::sys::cuLaunchHostFunc(
            stream.cu_stream(),
            Some(three_seconds_of_work),
            std::ptr::null_mut(),
        )
        .result()
        .unwrap();
    }
    pg.all_reduce(&mut t, ReduceOp::Sum)
        .expect("not aborted: the stream had not reached the collective");
    assert_eq!(t.to_vec::<f32>().unwrap(), [4.0; 4]);
    pg.check_completed().unwrap();
    println!("rank {rank}: summed after the queued work");
}
