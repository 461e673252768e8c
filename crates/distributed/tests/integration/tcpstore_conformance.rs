//! ditto's TCPStore client and server against the frames PyTorch's own client and server
//! exchanged (recorded from torch 2.15.0 by `tests/scripts/record_tcpstore_frames.py`, both
//! server backends: `tests/fixtures/tcpstore_frames_{libuv,classic}.txt`). Needs no
//! torch: the client talks to a scripted server that expects torch's client bytes and
//! answers torch's server bytes; the server is fed torch's client bytes and must answer
//! torch's server bytes. Bad input from a store is a typed error.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use distributed::rendezvous::{Claim, Handshake, JobToken, Side, Store, StoreClient, StoreServer};
use launch::LaunchError;

const TIMEOUT: Duration = Duration::from_secs(10);
const FIXTURES: [&str; 2] = ["tcpstore_frames_libuv.txt", "tcpstore_frames_classic.txt"];

/// One recorded operation: what torch's client sent, what torch's server answered.
struct Op {
    name: String,
    sent: Vec<u8>,
    answered: Vec<u8>,
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

fn recorded(file: &str) -> (String, Vec<Op>) {
    let path = format!("{}/tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let header = text.lines().next().unwrap().to_string();
    assert!(header.contains("torch 2.15.0"), "{path}: {header}");
    let mut ops: Vec<Op> = Vec::new();
    for line in text.lines().skip(1) {
        if let Some(name) = line.strip_prefix("op ") {
            ops.push(Op {
                name: name.into(),
                sent: Vec::new(),
                answered: Vec::new(),
            });
        } else if let Some(bytes) = line.strip_prefix("> ") {
            ops.last_mut().unwrap().sent = hex(bytes.trim());
        } else if let Some(bytes) = line.strip_prefix("< ") {
            ops.last_mut().unwrap().answered = hex(bytes.trim());
        } else if line == ">" || line == "<" {
            // an empty direction
        }
    }
    (header, ops)
}

fn op<'a>(ops: &'a [Op], name: &str) -> &'a Op {
    ops.iter()
        .find(|o| o.name == name)
        .unwrap_or_else(|| panic!("no op {name}"))
}

/// The length of the `WAIT` query at the start of `sent` (type, `u64` count, then each
/// key as a `u64` length and its bytes).
fn wait_len(sent: &[u8]) -> usize {
    let word = |at: usize| u64::from_le_bytes(sent[at..at + 8].try_into().unwrap()) as usize;
    let mut at = 9;
    for _ in 0..word(1) {
        at += 8 + word(at);
    }
    at
}

/// A scripted server: checks that the client sends exactly each op's recorded bytes and
/// answers the recorded bytes. The connect op is checked by shape, since ditto's client
/// pings with a nonce of its own and does not count itself into `init/`.
fn scripted_server(script: Vec<(Vec<u8>, Vec<u8>)>) -> (SocketAddr, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut client, _) = listener.accept().unwrap();
        client.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut connect = [0u8; 10];
        client.read_exact(&mut connect).unwrap();
        assert_eq!(
            connect[..5],
            [0x00, 0xce, 0xf7, 0x85, 0x3c],
            "VALIDATE and torch's magic"
        );
        assert_eq!(connect[5], 13, "PING");
        client.write_all(&connect[6..]).unwrap();
        for (expected, answer) in script {
            let mut sent = vec![0u8; expected.len()];
            client.read_exact(&mut sent).unwrap();
            assert_eq!(
                sent, expected,
                "the client's bytes differ from torch's client's"
            );
            client.write_all(&answer).unwrap();
        }
    });
    (address, server)
}

#[test]
fn the_client_sends_torchs_bytes_and_reads_torchs_answers() {
    for file in FIXTURES {
        let (header, ops) = recorded(file);
        // A client waits for each answer before its next query, so the ops that are two
        // queries (a `WAIT` before a `GET`, or before a `CANCEL_WAIT`) are two steps.
        let script_of = |names: &[&str]| -> Vec<(Vec<u8>, Vec<u8>)> {
            let mut script = Vec::new();
            for name in names {
                let Op { sent, answered, .. } = op(&ops, name);
                if sent[0] == 6 && sent.len() > wait_len(sent) {
                    let (wait, rest) = sent.split_at(wait_len(sent));
                    let stop_waiting = if *name == "wait_cancelled" { 0 } else { 1 };
                    script.push((wait.to_vec(), answered[..stop_waiting].to_vec()));
                    script.push((rest.to_vec(), answered[stop_waiting..].to_vec()));
                } else {
                    script.push((sent.clone(), answered.clone()));
                }
            }
            script
        };
        let names = [
            "set",
            "get",
            "add",
            "add_negative",
            "check_present",
            "check_absent",
            "wait_present",
            "wait_cancelled",
            "compare_set_match",
            "compare_set_mismatch",
            "compare_set_absent_empty",
            "delete_present",
            "delete_absent",
            "empty_value",
            "get_empty",
        ];
        let (address, server) = scripted_server(script_of(&names));
        let mut client = StoreClient::connect(&address.to_string(), None, TIMEOUT).unwrap();
        client.set("ditto/key", b"value-1").unwrap();
        assert_eq!(
            client.get("ditto/key", TIMEOUT).unwrap().unwrap(),
            b"value-1"
        );
        assert_eq!(client.add("ditto/counter", 5).unwrap(), 5);
        assert_eq!(client.add("ditto/counter", -7).unwrap(), -2);
        assert!(client.check(&["ditto/key"]).unwrap());
        assert!(!client.check(&["ditto/key", "ditto/absent"]).unwrap());
        assert!(client.wait(&["ditto/key"], TIMEOUT).unwrap());
        assert!(
            !client
                .wait(&["ditto/absent"], Duration::from_millis(300))
                .unwrap(),
            "cancelled"
        );
        assert_eq!(
            client
                .compare_set("ditto/key", b"value-1", b"value-2")
                .unwrap(),
            b"value-2"
        );
        assert_eq!(
            client
                .compare_set("ditto/key", b"other", b"value-3")
                .unwrap(),
            b"value-2"
        );
        assert_eq!(
            client.compare_set("ditto/new", b"", b"first").unwrap(),
            b"first"
        );
        assert!(client.delete_key("ditto/new").unwrap());
        assert!(!client.delete_key("ditto/new").unwrap());
        client.set("ditto/empty", b"").unwrap();
        assert_eq!(client.get("ditto/empty", TIMEOUT).unwrap().unwrap(), b"");
        drop(client);
        server.join().unwrap_or_else(|_| panic!("{header}"));
    }
}

const SECRET: &[u8] = b"6a2f9c4e1b7d3a8f0e5c2b9d4a7f1e3c6b8d0a2f5e9c3b7d1a4f8e2c6b0d9a3f";

/// A connection to a fresh ditto store (world 2) that passed the handshake as rank 1.
fn ditto_session() -> (distributed::rendezvous::RunningStore, TcpStream) {
    let token = JobToken::new("conformance", Some(SECRET)).unwrap();
    let running = StoreServer::bind("127.0.0.1:0")
        .unwrap()
        .start(2, &token)
        .unwrap();
    let mut stream = TcpStream::connect(running.address()).unwrap();
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let peer_nonce = [3u8; 32];
    stream
        .write_all(
            &[
                &b"DTRV\x03"[..],
                &2u32.to_le_bytes(),
                &1u32.to_le_bytes(),
                &peer_nonce,
            ]
            .concat(),
        )
        .unwrap();
    let mut challenge = [0u8; 33];
    stream.read_exact(&mut challenge).unwrap();
    let master_nonce: [u8; 32] = challenge[1..].try_into().unwrap();
    let claim = |side| Claim {
        side,
        peer_nonce: &peer_nonce,
        master_nonce: &master_nonce,
        world: 2,
        rank: 1,
    };
    stream.write_all(&token.prove(&claim(Side::Peer))).unwrap();
    let mut accepted = [0u8; 33];
    stream.read_exact(&mut accepted).unwrap();
    assert_eq!(accepted[0], 5);
    assert_eq!(accepted[1..], token.prove(&claim(Side::Master)));
    (running, stream)
}

#[test]
fn the_server_answers_torchs_client_with_torchs_servers_bytes() {
    for file in FIXTURES {
        let (header, ops) = recorded(file);
        let (_running, mut stream) = ditto_session();
        for recorded in &ops {
            stream.write_all(&recorded.sent).unwrap();
            let mut answer = vec![0u8; recorded.answered.len()];
            stream.read_exact(&mut answer).unwrap();
            assert_eq!(answer, recorded.answered, "{header}: op {}", recorded.name);
            // Nothing more comes (queries without an answer stay silent).
            stream.set_nonblocking(true).unwrap();
            let mut extra = [0u8; 1];
            std::thread::sleep(Duration::from_millis(20));
            match stream.read(&mut extra) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                other => panic!("{header}: op {}: unexpected {other:?}", recorded.name),
            }
            stream.set_nonblocking(false).unwrap();
        }
    }
}

#[test]
fn the_server_closes_a_session_that_breaks_the_protocol() {
    let bad_queries: [&[u8]; 4] = [
        &[3, 4, 0, 0, 0, 0, 0, 0, 0, b'/', b'n', b'o', b'k'], // GET of an absent key
        &[14],                                                // QUEUE_PUSH: not spoken
        &[1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f], // a key of 2^63 bytes
        &[0, 1, 2, 3, 4],                                     // VALIDATE with a wrong magic
    ];
    for query in bad_queries {
        let (_running, mut stream) = ditto_session();
        stream.write_all(query).unwrap();
        let mut rest = Vec::new();
        assert_eq!(
            stream.read_to_end(&mut rest).unwrap(),
            0,
            "{query:?}: closed without an answer"
        );
    }
}

/// A fake store that answers `reply` to the client's `VALIDATE` + `PING`.
fn store_answering(reply: Vec<u8>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut client, _) = listener.accept().unwrap();
        let mut connect = [0u8; 10];
        let _ = client.read_exact(&mut connect);
        let _ = client.write_all(&reply);
        std::thread::sleep(Duration::from_millis(300));
    });
    address
}

#[test]
fn a_store_that_answers_garbage_or_closes_mid_frame_is_a_typed_error() {
    // The PING's nonce does not come back: not a TCPStore.
    let address = store_answering(b"HTTP".to_vec());
    match StoreClient::connect(&address.to_string(), None, TIMEOUT) {
        Err(LaunchError::Rendezvous { message, .. }) => {
            assert!(message.contains("PING"), "{message}")
        }
        other => panic!("expected garbage to be named, got {other:?}"),
    }
    // Two bytes of the four, then the connection closes.
    let address = store_answering(vec![1, 2]);
    match StoreClient::connect(&address.to_string(), None, TIMEOUT) {
        Err(LaunchError::StoreClosed { during, .. }) => assert_eq!(during, "PING"),
        other => panic!("expected a closed store, got {other:?}"),
    }
    // A value length of 2^60 after a proper connect: refused before allocating.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut client, _) = listener.accept().unwrap();
        let mut connect = [0u8; 10];
        client.read_exact(&mut connect).unwrap();
        client.write_all(&connect[6..]).unwrap();
        let mut wait = vec![0u8; 1 + 8 + 8 + 2];
        client.read_exact(&mut wait).unwrap();
        client.write_all(&[0]).unwrap(); // STOP_WAITING
        let mut get = vec![0u8; 1 + 8 + 2];
        client.read_exact(&mut get).unwrap();
        client.write_all(&(1u64 << 60).to_le_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(300));
    });
    let mut client = StoreClient::connect(&address.to_string(), None, TIMEOUT).unwrap();
    match client.get("k", TIMEOUT) {
        Err(LaunchError::Rendezvous { message, .. }) => {
            assert!(message.contains("more than"), "{message}")
        }
        other => panic!("expected a capped length, got {other:?}"),
    }
    server.join().unwrap();
}

#[test]
fn the_client_tries_every_address_a_name_resolves_to() {
    // `localhost` resolves to ::1 and 127.0.0.1 on most machines; the store listens on
    // the last of them only, so a client that tried only the first would miss it.
    use std::net::ToSocketAddrs;
    let resolved: Vec<SocketAddr> = ("localhost", 0).to_socket_addrs().unwrap().collect();
    if resolved.len() < 2 {
        eprintln!("localhost resolves to {resolved:?} only here: this checks one address");
    }
    let token = JobToken::new("every-address", Some(SECRET)).unwrap();
    let last = *resolved.last().unwrap();
    let running = StoreServer::bind(last).unwrap().start(2, &token).unwrap();
    let address = format!("localhost:{}", running.address().port());
    let handshake = Handshake {
        token: &token,
        world: 2,
        rank: 1,
    };
    let mut client = StoreClient::connect(&address, Some(handshake), TIMEOUT).unwrap();
    client.set("k", b"v").unwrap();
    assert_eq!(client.get("k", TIMEOUT).unwrap().unwrap(), b"v");
}
