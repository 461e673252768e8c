//! The rendezvous on a port that strangers can reach (issue 20): only peers that prove
//! the job token take a slot, and nothing a stranger does ends or holds up the forming
//! job. Loopback only; every test is bounded by a short timeout.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distributed::rendezvous::{fetch, Claim, JobToken, Refusal, RendezvousServer, Side};
use distributed::DistError;

const PAYLOAD: &[u8] = &[42u8; 128];
const TIMEOUT: Duration = Duration::from_secs(20);

fn job() -> JobToken {
    JobToken::new("the-job", Some(b"shared secret")).unwrap()
}

fn other_job() -> JobToken {
    JobToken::new("another-job", Some(b"shared secret")).unwrap()
}

/// Serves a job of `world` ranks on a free loopback port; `strangers` runs first (with
/// the address), then ranks `1..world` fetch. Returns the master's refusals, the time
/// the job took to form, and what `strangers` returned.
fn form_job_despite<T: Send>(
    world: usize,
    strangers: impl FnOnce(SocketAddr) -> T + Send,
) -> (Vec<Refusal>, Duration, T) {
    let server = RendezvousServer::bind("127.0.0.1:0").unwrap();
    let address = server.address();
    std::thread::scope(|scope| {
        let master = scope.spawn(move || server.serve(world, &job(), PAYLOAD, TIMEOUT));
        let seen = strangers(address);
        let started = Instant::now();
        let peers: Vec<_> = (1..world)
            .map(|rank| scope.spawn(move || fetch(address, rank, world, &job(), TIMEOUT)))
            .collect();
        for (rank, peer) in (1..).zip(peers) {
            assert_eq!(peer.join().unwrap().unwrap(), PAYLOAD, "rank {rank}");
        }
        let refusals = master.join().unwrap().expect("the job forms");
        (refusals, started.elapsed(), seen)
    })
}

/// Checks in by hand as `rank` of `world` and answers the challenge with `token`'s MAC
/// (ignoring the master's own proof, as an impostor would). Returns the connection,
/// ready for the verdict, and the bytes sent.
fn check_in_by_hand(
    address: SocketAddr,
    world: u32,
    rank: u32,
    token: &JobToken,
) -> (TcpStream, Vec<u8>) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let own = [rank as u8; 32];
    let mut sent = b"DTRV\x02".to_vec();
    sent.extend_from_slice(&world.to_le_bytes());
    sent.extend_from_slice(&rank.to_le_bytes());
    sent.extend_from_slice(&own);
    stream.write_all(&sent).unwrap();
    let mut challenge = [0u8; 65];
    stream.read_exact(&mut challenge).unwrap();
    assert_eq!(challenge[0], 4, "the master challenges every check-in");
    let nonce: [u8; 32] = challenge[1..33].try_into().unwrap();
    let proof = token.prove(&Claim {
        side: Side::Peer,
        challenge: &nonce,
        own_nonce: &own,
        world,
        rank,
    });
    stream.write_all(&proof).unwrap();
    sent.extend_from_slice(&proof);
    (stream, sent)
}

/// The master's refusal reason on `stream` (status 3, u32 length, text).
fn refusal_reason(stream: &mut TcpStream) -> String {
    let mut status = [0u8; 5];
    stream.read_exact(&mut status).unwrap();
    assert_eq!(status[0], 3, "a refusal");
    let len = u32::from_le_bytes(status[1..].try_into().unwrap()) as usize;
    let mut reason = vec![0u8; len];
    stream.read_exact(&mut reason).unwrap();
    String::from_utf8(reason).unwrap()
}

#[test]
fn a_check_in_without_the_token_is_refused_and_the_real_rank_still_gets_in() {
    let (refusals, _, reason) = form_job_despite(3, |address| {
        // An impostor claims rank 1 first, answering with another job's key.
        let (mut impostor, _) = check_in_by_hand(address, 3, 1, &other_job());
        refusal_reason(&mut impostor)
    });
    assert!(
        reason.contains("did not prove this job's token"),
        "{reason}"
    );
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert!(refusals[0].reason.contains("rank 1"), "{}", refusals[0]);
}

#[test]
fn a_rank_of_another_job_refuses_this_master() {
    let (refusals, _, error) = form_job_despite(2, |address| {
        fetch(address, 1, 2, &other_job(), TIMEOUT).unwrap_err()
    });
    match error {
        DistError::Rendezvous { message, .. } => {
            assert!(
                message.contains("did not prove this job's token"),
                "{message}"
            )
        }
        other => panic!("expected a refusal of the master, got {other}"),
    }
    // Both sides say why: the master logs its refusal of the rank too.
    assert_eq!(refusals.len(), 1, "{refusals:?}");
}

/// Records what a real rank sends through a proxy during a finished job, then replays
/// it to a new job with the same token: the master's fresh nonce makes the old MAC fail.
#[test]
fn a_check_in_replayed_from_a_finished_job_is_refused() {
    let recorded = Arc::new(Mutex::new(Vec::new()));
    let (_, _, ()) = form_job_despite(2, |_| ());
    let server = RendezvousServer::bind("127.0.0.1:0").unwrap();
    let master = server.address();
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let via = proxy.local_addr().unwrap();
    std::thread::scope(|scope| {
        let tape = Arc::clone(&recorded);
        scope.spawn(move || {
            let (mut from_peer, _) = proxy.accept().unwrap();
            let mut to_master = TcpStream::connect(master).unwrap();
            let mut back = to_master.try_clone().unwrap();
            let mut to_peer = from_peer.try_clone().unwrap();
            let replies = std::thread::spawn(move || std::io::copy(&mut back, &mut to_peer));
            let mut buf = [0u8; 256];
            while let Ok(n @ 1..) = from_peer.read(&mut buf) {
                tape.lock().unwrap().extend_from_slice(&buf[..n]);
                to_master.write_all(&buf[..n]).unwrap();
            }
            let _ = replies.join();
        });
        let master = scope.spawn(move || server.serve(2, &job(), PAYLOAD, TIMEOUT));
        assert_eq!(fetch(via, 1, 2, &job(), TIMEOUT).unwrap(), PAYLOAD);
        master.join().unwrap().unwrap();
    });
    let tape = recorded.lock().unwrap().clone();
    assert_eq!(tape.len(), 45 + 32, "a check-in and its answer");

    let (refusals, _, reason) = form_job_despite(2, |address| {
        let mut replay = TcpStream::connect(address).unwrap();
        replay.set_read_timeout(Some(TIMEOUT)).unwrap();
        replay.write_all(&tape[..45]).unwrap();
        let mut challenge = [0u8; 65];
        replay.read_exact(&mut challenge).unwrap();
        replay.write_all(&tape[45..]).unwrap();
        refusal_reason(&mut replay)
    });
    assert!(
        reason.contains("did not prove this job's token"),
        "{reason}"
    );
    assert_eq!(refusals.len(), 1, "{refusals:?}");
}

#[test]
fn silent_connections_do_not_hold_up_the_job() {
    let (_, took, silent) = form_job_despite(3, |address| {
        (0..8)
            .map(|_| TcpStream::connect(address).unwrap())
            .collect::<Vec<_>>()
    });
    // The handshake of a silent connection may last 5 s; the job does not wait for it.
    assert!(took < Duration::from_secs(3), "took {took:?}");
    drop(silent);
}

#[test]
fn an_http_request_does_not_end_the_job() {
    let (refusals, _, answer) = form_job_despite(2, |address| {
        let mut http = TcpStream::connect(address).unwrap();
        http.set_read_timeout(Some(TIMEOUT)).unwrap();
        http.write_all(b"GET / HTTP/1.1\r\nHost: master\r\n\r\n")
            .unwrap();
        let mut answer = Vec::new();
        let _ = http.read_to_end(&mut answer);
        answer
    });
    assert!(answer.is_empty(), "a stranger is told nothing: {answer:?}");
    assert!(
        refusals
            .iter()
            .any(|r| r.reason.contains("not a ditto rendezvous check-in")),
        "{refusals:?}"
    );
}

#[test]
fn a_second_check_in_for_a_rank_is_refused_and_the_first_keeps_its_slot() {
    let server = RendezvousServer::bind("127.0.0.1:0").unwrap();
    let address = server.address();
    std::thread::scope(|scope| {
        let master = scope.spawn(move || server.serve(3, &job(), PAYLOAD, TIMEOUT));
        let first = scope.spawn(move || fetch(address, 1, 3, &job(), TIMEOUT));
        std::thread::sleep(Duration::from_millis(300));
        match fetch(address, 1, 3, &job(), TIMEOUT) {
            Err(DistError::Rendezvous { message, .. }) => {
                assert!(
                    message.contains("rank 1 is already checked in"),
                    "{message}"
                )
            }
            other => panic!("expected the second rank 1 to be refused, got {other:?}"),
        }
        assert_eq!(fetch(address, 2, 3, &job(), TIMEOUT).unwrap(), PAYLOAD);
        assert_eq!(first.join().unwrap().unwrap(), PAYLOAD);
        let refusals = master.join().unwrap().unwrap();
        assert_eq!(refusals.len(), 1, "{refusals:?}");
    });
}

#[test]
fn a_peer_of_the_old_wire_version_is_told_why() {
    let (_, _, reason) = form_job_despite(2, |address| {
        let mut old = TcpStream::connect(address).unwrap();
        old.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut hello = b"DTRV\x01".to_vec();
        hello.extend_from_slice(&2u32.to_le_bytes());
        hello.extend_from_slice(&1u32.to_le_bytes());
        old.write_all(&hello).unwrap();
        refusal_reason(&mut old)
    });
    assert!(reason.contains("wire version 1"), "{reason}");
}

/// A fake master that announces huge lengths: the peer refuses them before allocating.
#[test]
fn lengths_from_the_master_are_capped_before_allocation() {
    for reply in [
        [&[3u8][..], &u32::MAX.to_le_bytes()].concat(), // a 4 GiB refusal reason
        [&[1u8][..], &u32::MAX.to_le_bytes()].concat(), // 4 billion missing ranks
    ] {
        let fake = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = fake.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut peer, _) = fake.accept().unwrap();
            let mut hello = [0u8; 45];
            peer.read_exact(&mut hello).unwrap();
            peer.write_all(&reply).unwrap();
            std::thread::sleep(Duration::from_millis(200));
        });
        match fetch(address, 1, 2, &job(), TIMEOUT) {
            Err(DistError::Rendezvous { message, .. }) => {
                assert!(message.contains("more than"), "{message}")
            }
            other => panic!("expected a capped length, got {other:?}"),
        }
        server.join().unwrap();
    }
}
