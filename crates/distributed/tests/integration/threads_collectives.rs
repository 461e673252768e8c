//! The threads backend: every collective against the serial reference at world sizes
//! 1 to 5, its rank-order sum, and the failures a rank can see (a peer that leaves, a
//! peer that never comes, ranks that disagree), each a typed error within the timeout.

use crate::support;

use std::time::{Duration, Instant};

use distributed::{DistError, ProcessGroup, ReduceOp, ThreadGroup};
use support::collectives::{bits, check_all, timeout_fields};
use tensor_core::{DType, Device, Tensor};

#[test]
fn collectives_match_the_serial_reference() {
    for world in 1..=5 {
        ThreadGroup::run(world, |pg| {
            check_all(&pg);
            Ok(())
        })
        .unwrap();
    }
}

/// The threads backend defines its sum as the fold in rank order: check it on values
/// whose sum depends on the order (rounding), against the serial fold.
#[test]
fn all_reduce_folds_in_rank_order() {
    // Powers by repeated multiplication: `powi` may round differently where the
    // optimiser folds or inlines it, and the ranks and the reference must see one value.
    let power = |x: f32, n: usize| (0..n).fold(1.0f32, |acc, _| acc * x);
    let value =
        |rank: usize, i: usize| power(1.0 + i as f32 * 1e-3, rank * 7 + 1) * power(1e-3, rank % 2);
    let n = 257;
    let results = ThreadGroup::run(4, |pg| {
        let mut t = Tensor::from_vec(
            (0..n).map(|i| value(pg.rank(), i)).collect(),
            &[n],
            Device::Cpu,
        )?;
        pg.all_reduce(&mut t, ReduceOp::Sum)?;
        Ok(t)
    })
    .unwrap();
    let expected: Vec<f32> = (0..n)
        .map(|i| (1..4).fold(value(0, i), |acc, q| acc + value(q, i)))
        .collect();
    let expected = Tensor::from_vec(expected, &[n], Device::Cpu).unwrap();
    for t in &results {
        assert_eq!(bits(t), bits(&expected));
    }
}

/// A rank that drops its handle (returns early) makes the others' next collective fail
/// with `PeerExited` naming it, long before the timeout; later calls report `Broken`.
#[test]
fn a_peer_exiting_early_is_a_typed_error() {
    let timeout = Duration::from_secs(30);
    let started = Instant::now();
    let results = ThreadGroup::run(3, |pg| {
        let pg = pg.with_timeout(timeout);
        if pg.rank() == 2 {
            return Ok(None); // leaves without taking part
        }
        if pg.rank() == 1 {
            // Arrive after rank 0 has already seen rank 2 leave: the same error.
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut t = Tensor::from_vec(vec![1.0f32; 4], &[4], Device::Cpu)?;
        let first = pg.all_reduce(&mut t, ReduceOp::Sum).unwrap_err();
        let second = pg.barrier().unwrap_err();
        Ok(Some((first, second)))
    })
    .unwrap();
    assert!(
        started.elapsed() < timeout / 2,
        "took {:?}",
        started.elapsed()
    );
    for (first, second) in results.into_iter().flatten() {
        match first {
            DistError::PeerExited {
                ranks,
                op,
                sequence,
            } => {
                assert_eq!(ranks, [2]);
                assert_eq!(op, "all_reduce");
                assert_eq!(sequence, Some(0));
            }
            other => panic!("expected PeerExited, got {other}"),
        }
        assert!(matches!(second, DistError::Broken { .. }), "{second}");
    }
}

/// A rank that never arrives (still alive, busy elsewhere) makes the others time out
/// with the missing rank named, within the timeout plus scheduling slack.
#[test]
fn a_missing_peer_times_out_with_its_rank_named() {
    let timeout = Duration::from_millis(300);
    let results = ThreadGroup::run(3, |pg| {
        let pg = pg.with_timeout(timeout);
        if pg.rank() == 1 {
            std::thread::sleep(timeout * 4);
            return Ok(None);
        }
        let started = Instant::now();
        let error = pg.barrier().unwrap_err();
        Ok(Some((error, started.elapsed())))
    })
    .unwrap();
    for (error, waited) in results.into_iter().flatten() {
        assert!(waited < timeout * 3, "waited {waited:?}");
        let (op, sequence, _, missing) = timeout_fields(&error);
        assert_eq!((op, sequence, missing), ("barrier", 0, Some(vec![1])));
    }
}

/// Ranks that call different collectives, or pass different sizes, all get `Mismatch`.
#[test]
fn disagreeing_ranks_get_a_mismatch() {
    let results = ThreadGroup::run(2, |pg| {
        let n = 3 + pg.rank();
        let mut t = Tensor::from_vec(vec![1.0f32; n], &[n], Device::Cpu)?;
        let sizes = pg.all_reduce(&mut t, ReduceOp::Sum).unwrap_err();
        let mut t = Tensor::from_vec(vec![1.0f32; 3], &[3], Device::Cpu)?;
        let ops = if pg.rank() == 0 {
            pg.broadcast(&mut t, 0).unwrap_err()
        } else {
            pg.all_reduce(&mut t, ReduceOp::Sum).unwrap_err()
        };
        let mut t = Tensor::zeros(
            &[2],
            if pg.rank() == 0 {
                DType::F32
            } else {
                DType::F64
            },
            Device::Cpu,
        )?;
        let dtypes = pg.broadcast(&mut t, 0).unwrap_err();
        Ok([sizes, ops, dtypes])
    })
    .unwrap();
    for errors in results {
        for e in errors {
            assert!(matches!(e, DistError::Mismatch { .. }), "{e}");
        }
    }
}

#[test]
fn a_panicking_rank_is_reported_and_does_not_hang_the_others() {
    let error = ThreadGroup::run(2, |pg| {
        if pg.rank() == 0 {
            panic!("rank 0 fails");
        }
        pg.barrier()
    })
    .unwrap_err();
    match error {
        DistError::RankPanicked { rank, message } => {
            assert_eq!(rank, 0);
            assert!(message.contains("rank 0 fails"));
        }
        other => panic!("expected RankPanicked, got {other}"),
    }
    assert!(ThreadGroup::new(0).is_err());
}

/// Four ranks; after two collectives rank 3 stops (alive, but never calls the third).
/// The other three end within the timeout (plus slack), each naming the collective, its
/// sequence number and rank 3.
#[test]
fn three_of_four_ranks_end_naming_the_one_that_stopped() {
    let timeout = Duration::from_millis(400);
    let started = Instant::now();
    let results = ThreadGroup::run_with_timeout(4, timeout, |pg| {
        let mut t = Tensor::from_vec(vec![1.0f32; 8], &[8], Device::Cpu)?;
        pg.all_reduce(&mut t, ReduceOp::Sum)?;
        pg.barrier()?;
        if pg.rank() == 3 {
            // Stopped: holds its handle (not an exit) past everyone's timeout.
            std::thread::sleep(timeout * 3);
            return Ok(None);
        }
        Ok(Some(pg.all_reduce(&mut t, ReduceOp::Sum).unwrap_err()))
    })
    .unwrap();
    assert!(
        started.elapsed() < timeout * 6,
        "took {:?}",
        started.elapsed()
    );
    let errors: Vec<_> = results.into_iter().flatten().collect();
    assert_eq!(errors.len(), 3);
    for error in errors {
        assert_eq!(
            timeout_fields(&error),
            ("all_reduce", 2, timeout, Some(vec![3]))
        );
        let text = error.to_string();
        assert!(
            text.contains("all_reduce (collective #2") && text.contains("[3]"),
            "{text}"
        );
    }
}
