//! The NCCL backend with ranks in separate processes, the layout torchrun launches, on
//! the CUDA stand-in's NCCL (host-executed; docs/cuda-standin.md, "NCCL"):
//!
//! - every collective against the serial reference at world size 2 and 4, with stray
//!   connections (an HTTP health check, a silent socket) at the clique's hub first;
//! - two ranks on one GPU are refused, as NCCL refuses them;
//! - a collective whose peer was killed blocks (NCCL has no timeout of its own), reports
//!   no async error, and ncclCommAbort from another thread releases it;
//! - the stand-in's safety valve ends such a wait in the end, naming the rank that left.
//!
//! The test re-runs its own binary as the ranks (`harness = false`: ranks are processes,
//! each told its role through the environment). Stand-in only: the abort and valve
//! checks rely on the stand-in running a collective inside its call (on a GPU the call
//! returns at once and the stream blocks), and world size 4 needs four GPUs.
#![cfg(feature = "nccl")]

#[path = "../integration/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cudarc::driver::{DevicePtr, DevicePtrMut};
use cudarc::nccl::{result, sys};
use distributed::{unique_id, NcclGroup, ProcessGroup, ReduceOp};
use support::collectives::check_all;
use tensor_core::{Device, Tensor};
use test_support::wait_with_limit;

const ROLE: &str = "NCCL_PROCESSES_ROLE";

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        return child(&role);
    }
    if !support::standin_nccl::standin_nccl_or_skip("nccl_standin_processes") {
        return;
    }
    for world in [2, 4] {
        every_collective_across_processes(world);
    }
    two_ranks_on_one_gpu_are_refused();
    a_dead_peer_blocks_until_abort();
    the_safety_valve_ends_the_wait_naming_the_rank();
    println!("nccl_standin_processes: all checks passed");
}

// ---- the parent: launches ranks and reads their verdicts -------------------------------

fn hex(id: &[u8; 128]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// Rank `rank` of `world` in a new process, with `role` and the id; the stand-in plays
/// four GPUs. Output is piped so the parent can read it.
fn spawn(role: &str, rank: usize, world: usize, id: &[u8; 128], valve_s: u64) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .env(ROLE, role)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("NCCL_PROCESSES_ID", hex(id))
        .env("DITTO_CUDA_STANDIN_DEVICES", "4")
        .env("DITTO_CUDA_STANDIN_NCCL_TIMEOUT_S", valve_s.to_string())
        // The raw calls of the abort and valve checks block inside the call.
        .env(
            "DITTO_CUDA_STANDIN_NCCL_MODE",
            if role == "abort" || role == "valve" {
                "blocking"
            } else {
                "early"
            },
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `child` at most `limit` ([`wait_with_limit`]); its stdout and stderr, after
/// checking it succeeded.
fn finish(child: Child, what: &str, limit: Duration) -> (String, String) {
    let (stdout, stderr, ok) = wait_with_limit(child, what, limit);
    assert!(ok, "{what}: failed\n{stdout}\n{stderr}");
    (stdout, stderr)
}

/// The hub's loopback port, which the stand-in's id carries after its 16-byte magic and
/// 8-byte key (tools/cuda-standin/src/nccl_wire.h, IdBody).
fn hub_port(id: &[u8; 128]) -> u16 {
    u16::from_le_bytes([id[24], id[25]])
}

fn every_collective_across_processes(world: usize) {
    let id = unique_id().unwrap();
    // Strays reach the hub before any rank: neither may end the clique or take a slot.
    let mut health_check = TcpStream::connect(("127.0.0.1", hub_port(&id))).unwrap();
    health_check
        .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let _silent = TcpStream::connect(("127.0.0.1", hub_port(&id))).unwrap();
    let ranks: Vec<Child> = (0..world)
        .map(|r| spawn("collectives", r, world, &id, 120))
        .collect();
    for (rank, child) in ranks.into_iter().enumerate() {
        let (out, _) = finish(
            child,
            &format!("rank {rank} of {world}"),
            Duration::from_secs(300),
        );
        assert!(out.contains("every collective matched"), "{out}");
    }
    println!(
        "world size {world}: every collective matched the serial reference, one process per rank"
    );
}

fn two_ranks_on_one_gpu_are_refused() {
    let id = unique_id().unwrap();
    let ranks: Vec<Child> = (0..2).map(|r| spawn("same-gpu", r, 2, &id, 120)).collect();
    for (rank, child) in ranks.into_iter().enumerate() {
        let (out, _) = finish(
            child,
            &format!("same-gpu rank {rank}"),
            Duration::from_secs(60),
        );
        assert!(
            out.contains("refused: NCCL ncclCommInitRankConfig: ncclInvalidUsage"),
            "{out}"
        );
    }
    println!("two ranks on one GPU: ncclCommInitRankConfig refuses both with ncclInvalidUsage");
}

/// A 2-rank job whose rank 1 is killed once both have joined: rank 0, in `role`, is
/// then told to go on, and its stdout and stderr are returned. The two tests below
/// differ only in what rank 0 does next (`abort` or `valve`) and what it must report.
fn rank_zero_after_rank_one_is_killed(role: &str) -> (String, String) {
    let id = unique_id().unwrap();
    let mut zero = spawn(role, 0, 2, &id, 120);
    let mut one = spawn("sleep", 1, 2, &id, 120);
    wait_for_line(&mut one, "joined");
    wait_for_line(&mut zero, "joined");
    one.kill().unwrap();
    one.wait().unwrap();
    writeln!(zero.stdin.as_mut().unwrap(), "go").unwrap();
    finish(zero, &format!("rank 0 ({role})"), Duration::from_secs(60))
}

/// Rank 1 is killed after joining; rank 0's all-reduce must then block (reporting no
/// async error), and ncclCommAbort from another thread must release it.
fn a_dead_peer_blocks_until_abort() {
    let (out, _) = rank_zero_after_rank_one_is_killed("abort");
    assert!(
        out.contains("released by abort: ncclInternalError"),
        "{out}"
    );
    println!(
        "a killed peer: the all-reduce blocks, async error ncclSuccess, ncclCommAbort releases it"
    );
}

/// As above, with no abort: the safety valve (2 s here) ends the wait, naming rank 1.
fn the_safety_valve_ends_the_wait_naming_the_rank() {
    let (out, err) = rank_zero_after_rank_one_is_killed("valve");
    assert!(out.contains("valve: ncclSystemError"), "{out}");
    assert!(
        err.contains("safety valve") && err.contains("rank(s) 1 left"),
        "{err}"
    );
    println!(
        "the safety valve: ncclSystemError after DITTO_CUDA_STANDIN_NCCL_TIMEOUT_S, naming rank 1"
    );
}

/// Reads `child`'s stdout until a line equal to `line`.
fn wait_for_line(child: &mut Child, line: &str) {
    let stdout = child.stdout.take().unwrap();
    let mut reader = BufReader::new(stdout);
    let mut got = String::new();
    loop {
        got.clear();
        assert!(
            reader.read_line(&mut got).unwrap() > 0,
            "no {line:?} from the child"
        );
        if got.trim() == line {
            break;
        }
    }
    // Hand the rest back, so finish() can read what follows.
    child.stdout = Some(reader.into_inner());
}

// ---- the ranks ------------------------------------------------------------------------

fn child(role: &str) {
    let var = |name: &str| std::env::var(name).unwrap();
    let rank: usize = var("RANK").parse().unwrap();
    let world: usize = var("WORLD_SIZE").parse().unwrap();
    let text = var("NCCL_PROCESSES_ID");
    let mut id = [0u8; 128];
    for (i, byte) in id.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap();
    }
    match role {
        "collectives" => {
            let pg = NcclGroup::new(rank, world, rank, &id).unwrap();
            check_all(&pg);
            sums_in_rank_order(&pg);
            println!("rank {rank}: every collective matched the serial reference");
        }
        "same-gpu" => match NcclGroup::new(rank, world, 0, &id) {
            Ok(_) => panic!("two ranks on cuda:0 were accepted"),
            Err(e) => println!("refused: {e}"),
        },
        "sleep" => {
            let _pg = NcclGroup::new(rank, world, rank, &id).unwrap();
            println!("joined");
            // Until the parent kills it (or, should the parent die first, its stdin ends).
            let mut line = String::new();
            while std::io::stdin().read_line(&mut line).unwrap_or(0) > 0 {}
        }
        "abort" | "valve" => blocked_all_reduce(rank, world, &id, role == "abort"),
        other => panic!("unknown role {other}"),
    }
}

/// check_all's values are small integers, exact in any order; these are not, so the
/// sum must be the stand-in's fixed order 0, 1, ..., n - 1 to match bit for bit (the
/// same order whether ranks are threads or processes).
fn sums_in_rank_order(pg: &NcclGroup) {
    let value = |rank: usize, i: usize| (1.0f32 + i as f32 * 1e-3).powi(rank as i32 * 7 + 1);
    let n = 4099;
    let mine: Vec<f32> = (0..n).map(|i| value(pg.rank(), i)).collect();
    let mut t = Tensor::from_vec(mine, &[n], Device::Cpu)
        .unwrap()
        .to_device(pg.device())
        .unwrap();
    pg.all_reduce(&mut t, ReduceOp::Sum).unwrap();
    let expected: Vec<u32> = (0..n)
        .map(|i| {
            (1..pg.world_size())
                .fold(value(0, i), |acc, r| acc + value(r, i))
                .to_bits()
        })
        .collect();
    let got: Vec<u32> = t
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();
    assert_eq!(
        got,
        expected,
        "rank {}: the sum is not in rank order",
        pg.rank()
    );
}

/// A raw NCCL all-reduce on `cuda:rank` (ditto's group keeps its communicator to
/// itself), after the parent says "go" on stdin; with `abort`, another thread aborts it.
fn blocked_all_reduce(rank: usize, world: usize, id: &[u8; 128], abort: bool) {
    let stream = tensor_core::cuda::default_stream(rank).unwrap();
    stream.context().bind_to_thread().unwrap();
    let mut comm = std::mem::MaybeUninit::uninit();
    let unique = sys::ncclUniqueId {
        internal: id.map(|b| b as std::ffi::c_char),
    };
    // SAFETY: the device's context is current; `comm` is read only after success.
    let comm = unsafe {
        result::comm_init_rank(comm.as_mut_ptr(), world as i32, unique, rank as i32).unwrap();
        comm.assume_init()
    };
    println!("joined");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    if !abort {
        // The valve is read at each call: short for the all-reduce only, so that a slow
        // start of the other rank under load cannot trip it during the join.
        std::env::set_var("DITTO_CUDA_STANDIN_NCCL_TIMEOUT_S", "2");
    }

    let n = 64;
    let send = stream.alloc_zeros::<f32>(n).unwrap();
    let mut recv = stream.alloc_zeros::<f32>(n).unwrap();
    let handle = comm as usize;
    let worker = {
        let stream = stream.clone();
        std::thread::spawn(move || {
            stream.context().bind_to_thread().unwrap();
            let (s, _a) = send.device_ptr(&stream);
            let (r, _b) = recv.device_ptr_mut(&stream);
            // SAFETY: both buffers hold n f32 on this rank's device; the handle is live
            // until the abort below, which waits for this call to leave.
            unsafe {
                result::all_reduce(
                    s as *const std::ffi::c_void,
                    r as *mut std::ffi::c_void,
                    n,
                    sys::ncclDataType_t::ncclFloat32,
                    sys::ncclRedOp_t::ncclSum,
                    handle as sys::ncclComm_t,
                    stream.cu_stream() as _,
                )
            }
            .map(drop)
        })
    };
    if !abort {
        let outcome = worker.join().unwrap();
        println!("valve: {:?}", outcome.unwrap_err().0);
        // SAFETY: the communicator is live; no other call is using it.
        unsafe { result::comm_abort(comm).unwrap() };
        return;
    }
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !worker.is_finished(),
        "the all-reduce returned with its peer dead"
    );
    let mut async_error = sys::ncclResult_t::ncclInternalError;
    // SAFETY: the communicator is live; NCCL allows this call from another thread.
    unsafe { sys::ncclCommGetAsyncError(comm, &mut async_error) }
        .result()
        .unwrap();
    assert_eq!(
        async_error,
        sys::ncclResult_t::ncclSuccess,
        "NCCL sees nothing wrong while blocked"
    );
    let start = Instant::now();
    // SAFETY: the handle came from ncclCommInitRank; it is not used after this.
    unsafe { result::comm_abort(comm).unwrap() };
    let outcome = worker.join().unwrap();
    assert!(start.elapsed() < Duration::from_secs(10));
    println!("released by abort: {:?}", outcome.unwrap_err().0);
    // A second abort of the same handle (undefined on NCCL) is a typed error here.
    // SAFETY: the stand-in keeps aborted communicators' memory to recognise them.
    let again = unsafe { result::comm_abort(comm) };
    assert!(
        matches!(again, Err(e) if e.0 == sys::ncclResult_t::ncclInvalidArgument),
        "a second abort must say the handle is not a live communicator"
    );
}
