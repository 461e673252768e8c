//! The NCCL backend's collectives at world size 2, ranks as threads on cuda:0 and cuda:1,
//! against serial references. Runs where NCCL loads (the CUDA stand-in's libnccl.so.2 in
//! CI, `eval "$(bash scripts/cuda_standin.sh --print-env)"`); skipped elsewhere unless
//! REQUIRE_GPU=1 says it must run.
#![cfg(feature = "nccl")]

use crate::support;

use std::time::{Duration, Instant};

use distributed::{is_nccl_available, unique_id, DistError, NcclGroup, ProcessGroup, ReduceOp};
use support::collectives::timeout_fields;
use tensor_core::{Device, Tensor};

fn skip() -> bool {
    if is_nccl_available() {
        return false;
    }
    assert!(
        std::env::var("REQUIRE_GPU").as_deref() != Ok("1"),
        "REQUIRE_GPU=1 but NCCL is not available"
    );
    println!("NCCL not available: skipped");
    true
}

#[test]
fn two_ranks_match_the_serial_reference() {
    if skip() {
        return;
    }
    let id = unique_id().unwrap();
    let value = |rank: usize, i: usize| (1.0f32 + i as f32 * 1e-3).powi(rank as i32 * 7 + 1);
    let n = 257;
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let pg = NcclGroup::new(rank, 2, rank, &id).unwrap();
                let dev = Device::Cuda(rank);
                let data: Vec<f32> = (0..n).map(|i| value(rank, i)).collect();
                let mut t = Tensor::from_vec(data, &[n], Device::Cpu)
                    .unwrap()
                    .to_device(dev)
                    .unwrap();
                pg.all_reduce(&mut t, ReduceOp::Sum).unwrap();
                // Uneven all_gather: rank 0 gives 3 elements, rank 1 gives 0.
                let counts = [3usize, 0];
                let mine = Tensor::from_vec(
                    vec![rank as f32 + 1.0; counts[rank]],
                    &[counts[rank]],
                    Device::Cpu,
                )
                .unwrap()
                .to_device(dev)
                .unwrap();
                let mut gathered = Tensor::from_vec(vec![0f32; 3], &[3], Device::Cpu)
                    .unwrap()
                    .to_device(dev)
                    .unwrap();
                pg.all_gather(&mut gathered, &mine, &counts).unwrap();
                pg.barrier().unwrap();
                (
                    t.to_vec::<f32>().unwrap(),
                    gathered.to_vec::<f32>().unwrap(),
                )
            })
        })
        .collect();
    let results: Vec<_> = ranks.into_iter().map(|h| h.join().unwrap()).collect();
    let expected: Vec<f32> = (0..n).map(|i| value(0, i) + value(1, i)).collect();
    for (sum, gathered) in &results {
        assert_eq!(
            sum.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            expected.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        assert_eq!(gathered, &vec![1.0f32; 3]);
    }
}

/// After one all-reduce, rank 1 stops in the middle of the run (alive, holding its
/// communicator, never calling the second). Rank 0's second all-reduce returns once
/// enqueued; its watchdog aborts the communicator after the collective timeout, which
/// releases rank 0's read of the output, and the group then reports the typed error
/// naming the collective and its sequence number; the group is unusable afterwards.
#[test]
fn a_rank_that_stops_makes_the_others_end_through_the_watchdog() {
    if skip() {
        return;
    }
    let timeout = Duration::from_secs(1);
    let id = unique_id().unwrap();
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let pg = NcclGroup::new(rank, 2, rank, &id)
                    .unwrap()
                    .with_timeout(timeout);
                let dev = Device::Cuda(rank);
                let mut t = Tensor::from_vec(vec![1.0f32; 64], &[64], Device::Cpu)
                    .unwrap()
                    .to_device(dev)
                    .unwrap();
                pg.all_reduce(&mut t, ReduceOp::Sum).unwrap();
                if rank == 1 {
                    std::thread::sleep(timeout * 4);
                    return None;
                }
                let started = Instant::now();
                pg.all_reduce(&mut t, ReduceOp::Sum)
                    .expect("the call returns once the collective is enqueued");
                // The read waits on the stream, which the watchdog's abort releases; what
                // it read is garbage, and the group says so.
                let _ = t.to_vec::<f32>();
                let error = pg.check_completed().unwrap_err();
                let waited = started.elapsed();
                let later = pg.barrier().unwrap_err();
                Some((error, waited, later))
            })
        })
        .collect();
    let mut results: Vec<_> = ranks.into_iter().map(|h| h.join().unwrap()).collect();
    let (error, waited, later) = results.swap_remove(0).expect("rank 0 reports");
    assert!(
        waited >= timeout && waited < timeout * 3,
        "waited {waited:?}"
    );
    assert_eq!(timeout_fields(&error), ("all_reduce", 1, timeout, None));
    assert!(matches!(later, DistError::Broken { .. }), "{later}");
}
