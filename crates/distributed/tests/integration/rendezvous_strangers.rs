//! The rendezvous on a port that strangers can reach (issues 20 and 32): only peers that
//! prove the job token get a store session; a process that grabbed the port first cannot
//! hand a rank its id; slow or silent connections neither stop nor delay the job; no
//! refusal or unproven reply tells anything about the job; a recorded handshake cannot
//! be replayed; a peer that leaves is seen as gone. Loopback only; every test is
//! bounded by a short timeout.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distributed::rendezvous::{
    check_in_record, Claim, JobToken, Refusal, Rendezvous, Side, StoreServer, REFUSED_UNPROVEN,
};
use launch::LaunchError;

const PAYLOAD: &[u8] = &[42u8; 128];
const TIMEOUT: Duration = Duration::from_secs(20);
const SECRET: &[u8] = b"3b8f0d2c6e4a1f9b7d5c3e1a0f8d6b4c2a9e7f5d3b1c0e8a6f4d2b0c9e7a5f3d";
const JOB: &str = "the-job-7f3a";

fn job() -> JobToken {
    JobToken::new(JOB, Some(SECRET)).unwrap()
}

fn job_without_secret() -> JobToken {
    JobToken::new(JOB, None).unwrap()
}

fn other_job() -> JobToken {
    JobToken::new("another-job", Some(SECRET)).unwrap()
}

fn fetch(
    address: SocketAddr,
    rank: usize,
    world: usize,
    token: &JobToken,
    timeout: Duration,
) -> launch::Result<Vec<u8>> {
    Rendezvous::peer(&address.to_string(), token, world, rank, timeout)?.exchange(None)
}

/// Serves a job of `world` ranks (token `token`) on a free loopback port; `strangers`
/// runs first (with the address), then ranks `1..world` fetch. Returns rank 0's
/// refusals, the time the job took to form once the real ranks started, and what
/// `strangers` returned.
fn form_job_despite<T: Send>(
    world: usize,
    token: &JobToken,
    strangers: impl FnOnce(SocketAddr) -> T + Send,
) -> (Vec<Refusal>, Duration, T) {
    let running = StoreServer::bind("127.0.0.1:0")
        .unwrap()
        .start(world, token)
        .unwrap();
    let address = running.address();
    std::thread::scope(|scope| {
        let seen = strangers(address);
        let master = scope.spawn(move || {
            let mut host = Rendezvous::hosting(running, token, world, TIMEOUT);
            host.exchange(Some(PAYLOAD)).map(|_| host.take_refusals())
        });
        let started = Instant::now();
        let peers: Vec<_> = (1..world)
            .map(|rank| scope.spawn(move || fetch(address, rank, world, token, TIMEOUT)))
            .collect();
        for (rank, peer) in (1..).zip(peers) {
            assert_eq!(peer.join().unwrap().unwrap(), PAYLOAD, "rank {rank}");
        }
        let took = started.elapsed();
        let refusals = master.join().unwrap().expect("the job forms");
        (refusals, took, seen)
    })
}

/// The store's refusal on `stream` (status 3, u32 length, text).
fn refusal_reason(stream: &mut TcpStream) -> String {
    let mut head = [0u8; 5];
    stream.read_exact(&mut head).unwrap();
    assert_eq!(head[0], 3, "a refusal");
    let len = u32::from_le_bytes(head[1..].try_into().unwrap()) as usize;
    let mut reason = vec![0u8; len];
    stream.read_exact(&mut reason).unwrap();
    String::from_utf8(reason).unwrap()
}

/// Checks in by hand as `rank` of `world`, reads the challenge and answers it with
/// `token`'s proof. Returns the connection (the store's answer to the proof comes next)
/// and every byte sent and received.
fn check_in_by_hand(
    address: SocketAddr,
    world: u32,
    rank: u32,
    token: &JobToken,
) -> (TcpStream, Vec<u8>, Vec<u8>) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let peer_nonce = [rank as u8; 32];
    let mut sent = b"DTRV\x03".to_vec();
    sent.extend_from_slice(&world.to_le_bytes());
    sent.extend_from_slice(&rank.to_le_bytes());
    sent.extend_from_slice(&peer_nonce);
    stream.write_all(&sent).unwrap();
    let mut challenge = [0u8; 33];
    stream.read_exact(&mut challenge).unwrap();
    assert_eq!(challenge[0], 4, "the store challenges every check-in");
    let master_nonce: [u8; 32] = challenge[1..].try_into().unwrap();
    let proof = token.prove(&Claim {
        side: Side::Peer,
        peer_nonce: &peer_nonce,
        master_nonce: &master_nonce,
        world,
        rank,
    });
    stream.write_all(&proof).unwrap();
    sent.extend_from_slice(&proof);
    (stream, sent, challenge.to_vec())
}

/// A process bound to the port before rank 0 that answers `reply` to every check-in
/// (after reading the 45-byte check-in, and the 32-byte proof when `reply` starts with
/// a challenge); returns its address.
fn impostor(reply: Vec<u8>) -> SocketAddr {
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = fake.local_addr().unwrap();
    std::thread::spawn(move || {
        for peer in fake.incoming().take(4) {
            let Ok(mut peer) = peer else { continue };
            let mut hello = [0u8; 45];
            let _ = peer.read_exact(&mut hello);
            if reply[0] == 4 {
                let _ = peer.write_all(&reply[..33]);
                let mut proof = [0u8; 32];
                let _ = peer.read_exact(&mut proof);
                let _ = peer.write_all(&reply[33..]);
            } else {
                let _ = peer.write_all(&reply);
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    address
}

#[test]
fn a_process_that_answers_go_first_cannot_hand_any_rank_its_id() {
    let forged_id = [0xEEu8; 128];
    let go = [&[0u8][..], &128u32.to_le_bytes(), &forged_id].concat(); // wire version 2's GO
    let accepted = [&[5u8][..], &[0u8; 32]].concat(); // "accepted" with a forged proof
    let challenge_then_go = [&[4u8][..], &[1u8; 32], &go].concat();
    let challenge_then_forged_proof = [&[4u8][..], &[1u8; 32], &accepted].concat();
    for token in [job(), job_without_secret()] {
        for reply in [
            &go,
            &accepted,
            &challenge_then_go,
            &challenge_then_forged_proof,
        ] {
            let address = impostor(reply.clone());
            match fetch(address, 1, 2, &token, TIMEOUT) {
                Err(e @ LaunchError::Rendezvous { .. }) => {
                    let shown = e.to_string();
                    assert!(
                        shown.starts_with(&format!("rendezvous with {address}")),
                        "{shown}"
                    );
                    assert!(
                        shown.contains("nothing it sent was used")
                            || shown.contains("answered status"),
                        "{shown}"
                    );
                }
                other => panic!(
                    "secret {}: reply {:?}: expected a refusal, got {other:?}",
                    token.has_secret(),
                    &reply[..1]
                ),
            }
        }
    }
}

#[test]
fn sixty_four_trickling_connections_neither_stop_nor_delay_the_job() {
    let stop = Arc::new(AtomicBool::new(false));
    let (refusals, took, tricklers) = form_job_despite(2, &job(), |address| {
        let connected: Vec<TcpStream> = (0..64)
            .map(|_| TcpStream::connect(address).unwrap())
            .collect();
        connected
            .into_iter()
            .map(|mut stream| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    // One byte of a plausible check-in every 4 s, until closed or told.
                    for byte in b"DTRV\x03".iter().cycle() {
                        if stream.write_all(&[*byte]).is_err() {
                            return;
                        }
                        for _ in 0..40 {
                            if stop.load(Ordering::Relaxed) {
                                return;
                            }
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                })
            })
            .collect::<Vec<_>>()
    });
    stop.store(true, Ordering::Relaxed);
    assert!(
        took < Duration::from_secs(5),
        "the job took {took:?} to form"
    );
    eprintln!(
        "the 2-rank job formed {took:?} after the real rank arrived; {} refusal(s)",
        refusals.len()
    );
    for t in tricklers {
        t.join().unwrap();
    }
}

#[test]
fn no_refusal_or_unproven_reply_says_anything_about_the_job() {
    let mut replies = Vec::new();
    for token in [job(), job_without_secret()] {
        let (_, _, seen) = form_job_despite(2, &token, |address| {
            let mut seen = Vec::new();
            // A probe with a wrong proof: the challenge, then the refusal.
            let (mut probe, _, challenge) = check_in_by_hand(address, 2, 1, &other_job());
            seen.push(challenge);
            seen.push(refusal_reason(&mut probe).into_bytes());
            // A check-in of another wire version.
            let mut old = TcpStream::connect(address).unwrap();
            old.set_read_timeout(Some(TIMEOUT)).unwrap();
            old.write_all(&[&b"DTRV\x02"[..], &[0u8; 40]].concat())
                .unwrap();
            seen.push(refusal_reason(&mut old).into_bytes());
            // What a rank of another job reports.
            seen.push(
                fetch(address, 1, 2, &other_job(), TIMEOUT)
                    .unwrap_err()
                    .to_string()
                    .into_bytes(),
            );
            seen
        });
        for reply in &seen {
            assert!(
                !reply.windows(JOB.len()).any(|w| w == JOB.as_bytes()),
                "{}",
                String::from_utf8_lossy(reply)
            );
        }
        assert_eq!(String::from_utf8_lossy(&seen[1]), REFUSED_UNPROVEN);
        replies.push(seen[1..3].to_vec());
    }
    assert_eq!(
        replies[0], replies[1],
        "the refusals do not tell whether a secret is set"
    );
}

/// Records what a real rank sends through a relay during a finished job, then replays it
/// to a new job with the same token: the store's fresh nonce makes the old proof fail.
#[test]
fn a_recorded_handshake_replayed_is_refused() {
    let recorded = Arc::new(Mutex::new(Vec::new()));
    let running = StoreServer::bind("127.0.0.1:0")
        .unwrap()
        .start(2, &job())
        .unwrap();
    let master = running.address();
    let relay = TcpListener::bind("127.0.0.1:0").unwrap();
    let via = relay.local_addr().unwrap();
    std::thread::scope(|scope| {
        let tape = Arc::clone(&recorded);
        scope.spawn(move || {
            let (mut from_peer, _) = relay.accept().unwrap();
            let mut to_master = TcpStream::connect(master).unwrap();
            let mut back = to_master.try_clone().unwrap();
            let mut to_peer = from_peer.try_clone().unwrap();
            let replies = std::thread::spawn(move || std::io::copy(&mut back, &mut to_peer));
            let mut buf = [0u8; 512];
            while let Ok(n @ 1..) = from_peer.read(&mut buf) {
                tape.lock().unwrap().extend_from_slice(&buf[..n]);
                if to_master.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to_master.shutdown(std::net::Shutdown::Both);
            let _ = replies.join();
        });
        let host = scope.spawn(move || {
            Rendezvous::hosting(running, &job(), 2, TIMEOUT).exchange(Some(PAYLOAD))
        });
        let mut peer = Rendezvous::peer(&via.to_string(), &job(), 2, 1, TIMEOUT).unwrap();
        assert_eq!(peer.exchange(None).unwrap(), PAYLOAD);
        host.join().unwrap().unwrap();
        drop(peer);
    });
    let tape = recorded.lock().unwrap().clone();
    assert!(
        tape.len() > 45 + 32,
        "a check-in, its proof and the store queries"
    );

    let (refusals, _, reason) = form_job_despite(2, &job(), |address| {
        let mut replay = TcpStream::connect(address).unwrap();
        replay.set_read_timeout(Some(TIMEOUT)).unwrap();
        replay.write_all(&tape[..45]).unwrap();
        let mut challenge = [0u8; 33];
        replay.read_exact(&mut challenge).unwrap();
        let _ = replay.write_all(&tape[45..]);
        refusal_reason(&mut replay)
    });
    assert_eq!(reason, REFUSED_UNPROVEN);
    assert!(
        refusals.iter().any(|r| r.reason.contains("did not prove")),
        "{refusals:?}"
    );
}

/// TCPStore's `SET` of `key` (torch's client puts `/` in front) to `value`.
fn set_frame(key: &str, value: &[u8]) -> Vec<u8> {
    let key = format!("/{key}");
    [
        &[1u8][..],
        &(key.len() as u64).to_le_bytes(),
        key.as_bytes(),
        &(value.len() as u64).to_le_bytes(),
        value,
    ]
    .concat()
}

#[test]
fn a_peer_that_writes_extra_bytes_and_exits_is_seen_as_gone() {
    for extra in [&b"garbage after the check-in"[..], &[1u8, 200, 0][..]] {
        let running = StoreServer::bind("127.0.0.1:0")
            .unwrap()
            .start(3, &job())
            .unwrap();
        let address = running.address();
        let started = Instant::now();
        let result = std::thread::scope(|scope| {
            let host = scope.spawn(move || {
                Rendezvous::hosting(running, &job(), 3, TIMEOUT).exchange(Some(PAYLOAD))
            });
            let (mut peer, _, _) = check_in_by_hand(address, 3, 1, &job());
            let mut accepted = [0u8; 33];
            peer.read_exact(&mut accepted).unwrap();
            assert_eq!(accepted[0], 5, "accepted");
            let record = check_in_record(&job(), 3, 1, &[1u8; 32]);
            peer.write_all(&set_frame("ditto/check-in/1", &record))
                .unwrap();
            peer.write_all(extra).unwrap();
            drop(peer);
            host.join().unwrap()
        });
        assert!(started.elapsed() < Duration::from_secs(5), "seen at once");
        match result.unwrap_err() {
            LaunchError::PeerExited { ranks, .. } => assert_eq!(ranks, [1]),
            other => panic!("expected rank 1 named as gone, got {other}"),
        }
    }
}

#[test]
fn a_check_in_without_the_token_is_refused_and_the_real_rank_still_gets_in() {
    let (refusals, _, reason) = form_job_despite(3, &job(), |address| {
        // An impostor claims rank 1 first, proving another job's key.
        let (mut impostor, _, _) = check_in_by_hand(address, 3, 1, &other_job());
        refusal_reason(&mut impostor)
    });
    assert_eq!(reason, REFUSED_UNPROVEN);
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert!(refusals[0].reason.contains("rank 1"), "{}", refusals[0]);
}

#[test]
fn silent_connections_and_http_requests_do_not_hold_up_the_job() {
    let (refusals, took, (silent, answer)) = form_job_despite(3, &job(), |address| {
        let silent: Vec<_> = (0..8)
            .map(|_| TcpStream::connect(address).unwrap())
            .collect();
        let mut http = TcpStream::connect(address).unwrap();
        http.set_read_timeout(Some(TIMEOUT)).unwrap();
        http.write_all(b"GET / HTTP/1.1\r\nHost: master\r\n\r\n")
            .unwrap();
        let mut answer = Vec::new();
        let _ = http.read_to_end(&mut answer);
        (silent, answer)
    });
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(answer.is_empty(), "a stranger is told nothing: {answer:?}");
    assert!(
        refusals
            .iter()
            .any(|r| r.reason.contains("not a ditto check-in")),
        "{refusals:?}"
    );
    drop(silent);
}

#[test]
fn a_second_check_in_for_a_rank_is_refused_and_the_first_keeps_its_slot() {
    let running = StoreServer::bind("127.0.0.1:0")
        .unwrap()
        .start(3, &job())
        .unwrap();
    let address = running.address();
    std::thread::scope(|scope| {
        let host = scope.spawn(move || {
            let mut host = Rendezvous::hosting(running, &job(), 3, TIMEOUT);
            host.exchange(Some(PAYLOAD)).map(|_| host.take_refusals())
        });
        let first = scope.spawn(move || fetch(address, 1, 3, &job(), TIMEOUT));
        std::thread::sleep(Duration::from_millis(300));
        match fetch(address, 1, 3, &job(), TIMEOUT) {
            Err(LaunchError::Rendezvous { message, .. }) => {
                assert!(message.contains("rank 1 already checked in"), "{message}")
            }
            other => panic!("expected the second rank 1 to be refused, got {other:?}"),
        }
        assert_eq!(fetch(address, 2, 3, &job(), TIMEOUT).unwrap(), PAYLOAD);
        assert_eq!(first.join().unwrap().unwrap(), PAYLOAD);
        let refusals = host.join().unwrap().unwrap();
        assert_eq!(refusals.len(), 1, "{refusals:?}");
    });
}

#[test]
fn a_peer_of_an_older_wire_version_is_told_why() {
    let (_, _, reason) = form_job_despite(2, &job(), |address| {
        let mut old = TcpStream::connect(address).unwrap();
        old.set_read_timeout(Some(TIMEOUT)).unwrap();
        old.write_all(&[&b"DTRV\x02"[..], &[0u8; 40]].concat())
            .unwrap();
        refusal_reason(&mut old)
    });
    assert!(
        reason.contains("wire version 2") && reason.contains("version 3"),
        "{reason}"
    );
}

/// A fake store that announces a huge refusal: the peer refuses it before allocating.
#[test]
fn lengths_from_the_store_are_capped_before_allocation() {
    let address = impostor([&[3u8][..], &u32::MAX.to_le_bytes()].concat());
    match fetch(address, 1, 2, &job(), TIMEOUT) {
        Err(LaunchError::Rendezvous { message, .. }) => {
            assert!(message.contains("more than"), "{message}")
        }
        other => panic!("expected a capped length, got {other:?}"),
    }
}
