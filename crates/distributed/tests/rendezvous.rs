//! The TCP rendezvous that hands NCCL's id to every rank: all ranks get the payload;
//! a rank that never arrives, a rank that exits after checking in, and a master that
//! never comes up each give every waiting rank a typed error naming the rank, within
//! the timeout (plus the peers' short grace to hear the master's verdict).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use distributed::rendezvous::{fetch, Claim, JobToken, RendezvousServer, Side};
use distributed::DistError;

const PAYLOAD: &[u8] = &[7u8; 128];

fn token() -> JobToken {
    JobToken::new("rendezvous-test", Some(b"s3cret")).unwrap()
}

/// Runs the master and ranks `peers` of `world` concurrently; returns the master's
/// result, each peer's, and how long the slowest took.
#[allow(clippy::type_complexity)]
fn run(
    world: usize,
    peers: &[usize],
    timeout: Duration,
) -> (
    distributed::Result<()>,
    Vec<(usize, distributed::Result<Vec<u8>>)>,
    Duration,
) {
    let server = RendezvousServer::bind("127.0.0.1:0").unwrap();
    let address = server.address();
    let started = Instant::now();
    std::thread::scope(|scope| {
        let handles: Vec<_> = peers
            .iter()
            .map(|&rank| {
                scope.spawn(move || (rank, fetch(address, rank, world, &token(), timeout)))
            })
            .collect();
        let master = server.serve(world, &token(), PAYLOAD, timeout).map(drop);
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
fn a_rank_that_never_arrives_is_named_by_every_rank() {
    let timeout = Duration::from_millis(500);
    let (master, peers, took) = run(4, &[1, 3], timeout);
    assert!(took < timeout + Duration::from_secs(2), "took {took:?}");
    match master.unwrap_err() {
        DistError::Timeout { missing, .. } => assert_eq!(missing, [2]),
        other => panic!("master: expected a timeout, got {other}"),
    }
    for (rank, result) in peers {
        match result.unwrap_err() {
            DistError::Timeout { missing, .. } => assert_eq!(missing, [2], "rank {rank}"),
            other => panic!("rank {rank}: expected a timeout, got {other}"),
        }
    }
}

#[test]
fn a_rank_that_exits_after_checking_in_is_named_at_once() {
    let timeout = Duration::from_secs(30);
    let server = RendezvousServer::bind("127.0.0.1:0").unwrap();
    let address = server.address();
    let started = Instant::now();
    let (master, peer) = std::thread::scope(|scope| {
        // World 4: rank 3 never comes, so the job is still forming when rank 2 leaves.
        let peer = scope.spawn(move || fetch(address, 1, 4, &token(), timeout));
        // Rank 2 checks in by hand (wire version 2, proving the token), then its
        // process "exits" (the socket closes).
        let rank2 = scope.spawn(move || {
            let mut rank2 = TcpStream::connect(address).unwrap();
            let own = [9u8; 32];
            let mut hello = b"DTRV\x02".to_vec();
            hello.extend_from_slice(&4u32.to_le_bytes());
            hello.extend_from_slice(&2u32.to_le_bytes());
            hello.extend_from_slice(&own);
            rank2.write_all(&hello).unwrap();
            let mut challenge = [0u8; 1 + 64];
            rank2.read_exact(&mut challenge).unwrap();
            assert_eq!(challenge[0], 4, "a challenge");
            let master_nonce: [u8; 32] = challenge[1..33].try_into().unwrap();
            let proof = token().prove(&Claim {
                side: Side::Peer,
                challenge: &master_nonce,
                own_nonce: &own,
                world: 4,
                rank: 2,
            });
            rank2.write_all(&proof).unwrap();
            std::thread::sleep(Duration::from_millis(200));
        });
        let master = server.serve(4, &token(), PAYLOAD, timeout).map(drop);
        rank2.join().unwrap();
        (master, peer.join().unwrap())
    });
    assert!(
        started.elapsed() < timeout / 4,
        "took {:?}",
        started.elapsed()
    );
    for result in [master.map(|()| Vec::new()), peer] {
        match result.unwrap_err() {
            DistError::PeerExited { ranks, .. } => assert_eq!(ranks, [2]),
            other => panic!("expected PeerExited, got {other}"),
        }
    }
}

#[test]
fn a_master_that_never_comes_up_is_a_timeout_naming_rank_0() {
    // A port that was free a moment ago, now closed: connections are refused.
    let address = RendezvousServer::bind("127.0.0.1:0").unwrap().address();
    let timeout = Duration::from_millis(400);
    let started = Instant::now();
    match fetch(address, 1, 2, &token(), timeout).unwrap_err() {
        DistError::Timeout { missing, .. } => assert_eq!(missing, [0]),
        other => panic!("expected a timeout, got {other}"),
    }
    assert!(started.elapsed() < timeout + Duration::from_secs(2));
}

#[test]
fn a_rank_with_another_world_size_is_refused() {
    let server = RendezvousServer::bind("127.0.0.1:0").unwrap();
    let address = server.address();
    let timeout = Duration::from_secs(10);
    let (master, peer) = std::thread::scope(|scope| {
        let peer = scope.spawn(move || fetch(address, 1, 3, &token(), timeout));
        (
            server.serve(2, &token(), PAYLOAD, timeout),
            peer.join().unwrap(),
        )
    });
    assert!(
        matches!(master, Err(DistError::Rendezvous { .. })),
        "{master:?}"
    );
    match peer {
        Err(DistError::Rendezvous { message, .. }) => {
            assert!(message.contains("world size 3"), "{message}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(
        fetch(address, 0, 2, &token(), timeout).is_err(),
        "rank 0 serves, it does not fetch"
    );
}
