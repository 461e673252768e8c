//! The rendezvous that hands NCCL's id to every rank, on ditto's own store: all ranks
//! get the payload; a rank that never arrives, a rank that exits after checking in, and
//! a rank 0 that never comes up each give every waiting rank a typed error naming the
//! rank, within the timeout (plus the peers' short grace to hear rank 0's verdict).

use std::time::{Duration, Instant};

use distributed::rendezvous::{check_in_record, JobToken, Rendezvous, StoreServer};
use launch::{LaunchError, Result};

const PAYLOAD: &[u8] = &[7u8; 128];
const SECRET: &[u8] = b"9c1f3e5a7b2d4f6e8a0c1e3f5a7b9d2c4e6f8a0b1c3d5e7f9a2b4c6d8e0f1a3b";

fn token() -> JobToken {
    JobToken::new("rendezvous-test", Some(SECRET)).unwrap()
}

/// Rank `rank` of `world` joining rank 0's store at `address` and fetching the payload.
fn fetch(address: &str, rank: usize, world: usize, timeout: Duration) -> Result<Vec<u8>> {
    Rendezvous::peer(address, &token(), world, rank, timeout)?.exchange(None)
}

/// Runs rank 0 and ranks `peers` of `world` concurrently; returns rank 0's result, each
/// peer's, and how long the slowest took.
#[allow(clippy::type_complexity)]
fn run(
    world: usize,
    peers: &[usize],
    timeout: Duration,
) -> (Result<()>, Vec<(usize, Result<Vec<u8>>)>, Duration) {
    let running = StoreServer::bind("127.0.0.1:0")
        .unwrap()
        .start(world, &token())
        .unwrap();
    let address = running.address().to_string();
    let started = Instant::now();
    std::thread::scope(|scope| {
        let handles: Vec<_> = peers
            .iter()
            .map(|&rank| {
                let address = address.clone();
                scope.spawn(move || (rank, fetch(&address, rank, world, timeout)))
            })
            .collect();
        let mut host = Rendezvous::hosting(running, &token(), world, timeout);
        let master = host.exchange(Some(PAYLOAD)).map(drop);
        let results = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (master, results, started.elapsed())
    })
}

#[test]
fn every_rank_gets_the_payload() {
    let (master, peers, _) = run(4, &[1, 2, 3], Duration::from_secs(20));
    master.unwrap();
    for (rank, result) in peers {
        assert_eq!(result.unwrap(), PAYLOAD, "rank {rank}");
    }
}

#[test]
fn a_job_of_one_rank_forms_at_once() {
    let (master, peers, took) = run(1, &[], Duration::from_secs(20));
    master.unwrap();
    assert!(
        peers.is_empty() && took < Duration::from_secs(1),
        "took {took:?}"
    );
}

#[test]
fn a_rank_that_never_arrives_is_named_by_every_rank() {
    let timeout = Duration::from_millis(800);
    let (master, peers, took) = run(4, &[1, 3], timeout);
    assert!(took < timeout + Duration::from_secs(3), "took {took:?}");
    match master.unwrap_err() {
        LaunchError::Timeout { missing, .. } => assert_eq!(missing, [2]),
        other => panic!("rank 0: expected a timeout, got {other}"),
    }
    for (rank, result) in peers {
        match result.unwrap_err() {
            LaunchError::Timeout { missing, .. } => assert_eq!(missing, [2], "rank {rank}"),
            other => panic!("rank {rank}: expected a timeout, got {other}"),
        }
    }
}

#[test]
fn a_rank_that_exits_after_checking_in_is_named_at_once() {
    let timeout = Duration::from_secs(30);
    let running = StoreServer::bind("127.0.0.1:0")
        .unwrap()
        .start(4, &token())
        .unwrap();
    let address = running.address().to_string();
    let started = Instant::now();
    let (master, peer) = std::thread::scope(|scope| {
        // World 4: rank 3 never comes, so the job is still forming when rank 2 leaves.
        let leaver = {
            let address = address.clone();
            scope.spawn(move || {
                let mut rank2 = Rendezvous::peer(&address, &token(), 4, 2, timeout).unwrap();
                let keys = rank2.keys().clone();
                // Check in (write its record, docs/distributed.md §6) without waiting
                // for the verdict, then exit.
                let record = check_in_record(&token(), 4, 2, &[2u8; 32]);
                rank2
                    .store()
                    .set(&format!("{}/check-in/2", keys.base()), &record)
                    .unwrap();
                std::thread::sleep(Duration::from_millis(200));
            })
        };
        let peer = scope.spawn(move || fetch(&address, 1, 4, timeout));
        let mut host = Rendezvous::hosting(running, &token(), 4, timeout);
        let master = host.exchange(Some(PAYLOAD));
        leaver.join().unwrap();
        (master, peer.join().unwrap())
    });
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "named at once, not at the timeout"
    );
    for (who, result) in [("rank 0", master.map(drop)), ("rank 1", peer.map(drop))] {
        match result.unwrap_err() {
            LaunchError::PeerExited { ranks, .. } => assert_eq!(ranks, [2], "{who}"),
            other => panic!("{who}: expected rank 2 named as gone, got {other}"),
        }
    }
}

#[test]
fn a_rank_0_that_never_comes_up_is_named() {
    let address = StoreServer::bind("127.0.0.1:0")
        .unwrap()
        .address()
        .to_string(); // bound, then closed
    let timeout = Duration::from_millis(500);
    let started = Instant::now();
    match fetch(&address, 1, 2, timeout).unwrap_err() {
        LaunchError::Timeout { missing, .. } => assert_eq!(missing, [0]),
        other => panic!("expected a timeout naming rank 0, got {other}"),
    }
    assert!(started.elapsed() < timeout + Duration::from_secs(2));
}

#[test]
fn a_rank_0_that_goes_away_is_named() {
    let running = StoreServer::bind("127.0.0.1:0")
        .unwrap()
        .start(3, &token())
        .unwrap();
    let address = running.address().to_string();
    let peer = std::thread::spawn(move || fetch(&address, 1, 3, Duration::from_secs(30)));
    std::thread::sleep(Duration::from_millis(300));
    drop(running); // rank 0's process ends before the job formed
    match peer.join().unwrap().unwrap_err() {
        LaunchError::PeerExited { ranks, .. } => assert_eq!(ranks, [0]),
        other => panic!("expected rank 0 named as gone, got {other}"),
    }
}

#[test]
fn a_rank_launched_with_another_world_size_ends_the_job_for_every_rank() {
    let timeout = Duration::from_secs(20);
    let running = StoreServer::bind("127.0.0.1:0")
        .unwrap()
        .start(3, &token())
        .unwrap();
    let address = running.address().to_string();
    let started = Instant::now();
    let (master, good, bad) = std::thread::scope(|scope| {
        let good = {
            let address = address.clone();
            scope.spawn(move || fetch(&address, 1, 3, timeout))
        };
        let bad = scope.spawn(move || fetch(&address, 2, 4, timeout));
        let master = Rendezvous::hosting(running, &token(), 3, timeout).exchange(Some(PAYLOAD));
        (master, good.join().unwrap(), bad.join().unwrap())
    });
    assert!(started.elapsed() < Duration::from_secs(10));
    for (who, result) in [("rank 0", master), ("rank 1", good), ("the bad rank", bad)] {
        let message = result.unwrap_err().to_string();
        assert!(message.contains("world size 4"), "{who}: {message}");
    }
}

#[test]
fn a_restart_count_that_goes_backwards_is_refused() {
    use distributed::rendezvous::{check_restart_count, Store, RESTART_COUNT_KEY};
    let running = StoreServer::bind("127.0.0.1:0")
        .unwrap()
        .start(2, &token())
        .unwrap();
    let mut store = running.local();
    for count in [0, 0, 2, 2, 5] {
        check_restart_count(&mut store, count).unwrap();
    }
    match check_restart_count(&mut store, 4).unwrap_err() {
        LaunchError::Environment { name, message } => {
            assert_eq!(name, "TORCHELASTIC_RESTART_COUNT");
            assert!(
                message.contains("is 4") && message.contains("attempt 5"),
                "{message}"
            );
        }
        other => panic!("expected the restart count named, got {other}"),
    }
    store.set(RESTART_COUNT_KEY, b"not a number").unwrap();
    match check_restart_count(&mut store, 6).unwrap_err() {
        LaunchError::Rendezvous { message, .. } => {
            assert!(message.contains("not a restart count"), "{message}")
        }
        other => panic!("expected garbage in the store named, got {other}"),
    }
}
