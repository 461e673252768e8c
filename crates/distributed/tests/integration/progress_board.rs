//! Each rank's progress in the job's store names the rank(s) a timed-out collective
//! waited for (issue 27 item 4): a rank that stopped publishing (dead) and one that is
//! alive but never entered the collective are told apart; a gone store host is rank 0.
//! Ranks are threads here, on ditto's own store; no NCCL needed.

use std::time::{Duration, Instant};

use distributed::rendezvous::{JobToken, Rendezvous, StoreServer};
use distributed::{DistError, ProgressBoard, Straggler};

const TIMEOUT: Duration = Duration::from_secs(20);

fn token() -> JobToken {
    JobToken::new("progress-test", None).unwrap()
}

/// A formed job of `world` ranks (threads), each with its progress board.
fn boards(world: usize) -> Vec<ProgressBoard> {
    let running = StoreServer::bind("127.0.0.1:0")
        .unwrap()
        .start(world, &token())
        .unwrap();
    let address = running.address().to_string();
    let mut joined: Vec<(usize, Rendezvous)> = std::thread::scope(|scope| {
        let peers: Vec<_> = (1..world)
            .map(|rank| {
                let address = address.clone();
                scope.spawn(move || {
                    let mut r = Rendezvous::peer(&address, &token(), world, rank, TIMEOUT).unwrap();
                    r.exchange(None).unwrap();
                    (rank, r)
                })
            })
            .collect();
        let mut host = Rendezvous::hosting(running, &token(), world, TIMEOUT);
        host.exchange(Some(b"id")).unwrap();
        let mut all = vec![(0, host)];
        all.extend(peers.into_iter().map(|p| p.join().unwrap()));
        all
    });
    joined.sort_by_key(|(rank, _)| *rank);
    joined
        .into_iter()
        .map(|(rank, r)| ProgressBoard::start(r, rank, world).unwrap())
        .collect()
}

/// Every board in `ranks` enters and finishes collectives `0..n`.
fn run_collectives(boards: &[ProgressBoard], ranks: &[usize], n: u64) {
    for seq in 0..n {
        for &r in ranks {
            boards[r].entered(seq);
            boards[r].finished(seq, Ok(())).unwrap();
        }
    }
}

fn timed_out(sequence: u64) -> distributed::Result<()> {
    Err(DistError::CollectiveTimeout {
        op: "all_reduce",
        sequence,
        timeout: Duration::from_secs(15),
        missing: None,
    })
}

#[test]
fn a_dead_rank_is_named_with_the_last_collective_it_entered() {
    let mut boards = boards(3);
    run_collectives(&boards, &[0, 1, 2], 70);
    // Rank 2 dies between collectives #69 and #70; ranks 0 and 1 enter #70.
    drop(boards.pop());
    boards[0].entered(70);
    boards[1].entered(70);
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    let error = boards[1].finished(70, timed_out(70)).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "bounded");
    match &error {
        DistError::CollectiveTimeoutNamed {
            stragglers,
            sequence,
            ..
        } => {
            assert_eq!(*sequence, 70);
            assert_eq!(stragglers.len(), 1, "{stragglers:?}");
            assert_eq!(
                (stragglers[0].rank, stragglers[0].last_entered),
                (2, Some(69))
            );
            assert!(stragglers[0].silent_for.is_some(), "dead: {stragglers:?}");
        }
        other => panic!("expected the dead rank named, got {other}"),
    }
    let shown = error.to_string();
    assert!(
        shown.starts_with("all_reduce #70 timed out after 15s: rank 2 last entered collective #69 and has shown no sign of life"),
        "{shown}"
    );
}

#[test]
fn a_rank_that_is_alive_but_elsewhere_is_named_as_alive() {
    let boards = boards(3);
    run_collectives(&boards, &[0, 1, 2], 5);
    // Rank 1 is stuck before #5 (alive, still publishing); ranks 0 and 2 enter #5.
    boards[0].entered(5);
    boards[2].entered(5);
    std::thread::sleep(Duration::from_millis(100));
    let stragglers = boards[0].stragglers(5).unwrap();
    assert_eq!(
        stragglers,
        [Straggler {
            rank: 1,
            last_entered: Some(4),
            silent_for: None,
        }]
    );
    // Nobody missing: the plain timeout stays (the store cannot tell more).
    boards[1].entered(5);
    std::thread::sleep(Duration::from_millis(100));
    match boards[0].finished(5, timed_out(5)).unwrap_err() {
        DistError::CollectiveTimeout { sequence: 5, .. } => {}
        other => panic!("expected the plain timeout, got {other}"),
    }
}

#[test]
fn a_gone_store_host_is_named_as_rank_0() {
    let mut boards = boards(2);
    run_collectives(&boards, &[0, 1], 3);
    drop(boards.remove(0)); // rank 0's process ends, and its store with it
    boards[0].entered(3);
    let stragglers = boards[0].stragglers(3).unwrap();
    assert_eq!(stragglers.len(), 1, "{stragglers:?}");
    assert_eq!(stragglers[0].rank, 0);
}
