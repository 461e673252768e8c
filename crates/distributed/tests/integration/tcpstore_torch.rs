//! ditto's TCPStore client against PyTorch's real `TCPStore` server (both backends), and
//! ditto's rendezvous on it as under torchrun. Needs a Python with torch: set
//! `DITTO_TORCH_PYTHON` to it (`eval "$(bash scripts/install_torch.sh --print-env)"`;
//! CI does, docs/distributed.md §5). Without it the tests say so and pass, unless
//! `DITTO_REQUIRE_TORCH=1` (as in CI) turns the skip into a failure.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use distributed::rendezvous::{JobToken, Rendezvous, Store, StoreClient};
use launch::LaunchError;

const TIMEOUT: Duration = Duration::from_secs(20);

/// The Python with torch, or `None` (test skipped).
fn torch_python() -> Option<String> {
    match std::env::var("DITTO_TORCH_PYTHON") {
        Ok(python) if !python.is_empty() => Some(python),
        _ if std::env::var("DITTO_REQUIRE_TORCH").as_deref() == Ok("1") => {
            panic!("DITTO_REQUIRE_TORCH=1 but DITTO_TORCH_PYTHON is not set (scripts/install_torch.sh)")
        }
        _ => {
            eprintln!("DITTO_TORCH_PYTHON is not set: skipped (no torch to test against)");
            None
        }
    }
}

/// A torch TCPStore server in a Python child. The script prints the port, then runs
/// the commands it reads from stdin, one per line, printing each answer.
struct TorchStore {
    child: Child,
    input: ChildStdin,
    output: BufReader<std::process::ChildStdout>,
    port: u16,
    version: String,
}

const SERVER: &str = r#"
import datetime, sys, torch
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", 0, None, True, timeout=datetime.timedelta(seconds=20),
                 use_libuv=sys.argv[1] == "libuv", wait_for_workers=False)
print(store.port, torch.__version__, flush=True)
for line in sys.stdin:
    op, *args = line.split()
    if op == "set":
        store.set(args[0], bytes.fromhex(args[1]) if len(args) > 1 else b"")
        print("ok", flush=True)
    elif op == "get":
        print(store.get(args[0]).hex() or "-", flush=True)
    elif op == "add":
        print(store.add(args[0], int(args[1])), flush=True)
"#;

impl TorchStore {
    fn start(python: &str, backend: &str) -> TorchStore {
        let mut child = Command::new(python)
            .args(["-W", "ignore", "-c", SERVER, backend])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {python}: {e}"));
        let input = child.stdin.take().unwrap();
        let mut output = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        output.read_line(&mut first).unwrap();
        let mut words = first.split_whitespace();
        let port = words
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port: {first:?}"));
        let version = words.next().unwrap_or("?").to_string();
        TorchStore {
            child,
            input,
            output,
            port,
            version,
        }
    }

    fn ask(&mut self, command: &str) -> String {
        writeln!(self.input, "{command}").unwrap();
        let mut answer = String::new();
        self.output.read_line(&mut answer).unwrap();
        answer.trim().to_string()
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for TorchStore {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn dittos_client_and_torchs_client_share_keys_on_torchs_server() {
    let Some(python) = torch_python() else { return };
    for backend in ["libuv", "classic"] {
        let mut torch = TorchStore::start(&python, backend);
        eprintln!(
            "torch {} TCPStore ({backend}) on port {}",
            torch.version, torch.port
        );
        assert_eq!(torch.ask("set from/torch 68656c6c6f"), "ok");
        let mut ditto = StoreClient::connect(&torch.address(), None, TIMEOUT).unwrap();
        assert_eq!(ditto.get("from/torch", TIMEOUT).unwrap().unwrap(), b"hello");
        ditto.set("from/ditto", &[0, 1, 2, 255]).unwrap();
        assert_eq!(torch.ask("get from/ditto"), "000102ff");
        assert_eq!(ditto.add("counter", 5).unwrap(), 5);
        assert_eq!(torch.ask("add counter 2"), "7");
        assert_eq!(ditto.add("counter", -10).unwrap(), -3);
        assert!(ditto.check(&["from/torch", "from/ditto"]).unwrap());
        assert!(!ditto.check(&["from/torch", "absent"]).unwrap());
        assert!(!ditto.wait(&["absent"], Duration::from_millis(200)).unwrap());
        assert_eq!(
            ditto.get("absent", Duration::from_millis(200)).unwrap(),
            None
        );
        assert_eq!(ditto.compare_set("cas", b"", b"one").unwrap(), b"one");
        assert_eq!(ditto.compare_set("cas", b"one", b"two").unwrap(), b"two");
        assert_eq!(ditto.compare_set("cas", b"one", b"three").unwrap(), b"two");
        assert!(ditto.delete_key("cas").unwrap() && !ditto.delete_key("cas").unwrap());
        // The connection is still in step after the cancelled wait.
        ditto.set("empty", b"").unwrap();
        assert_eq!(torch.ask("get empty"), "-");
        assert_eq!(
            ditto.get("from/ditto", TIMEOUT).unwrap().unwrap(),
            [0, 1, 2, 255]
        );
    }
}

#[test]
fn the_rendezvous_runs_on_torchs_server_as_under_torchrun() {
    let Some(python) = torch_python() else { return };
    let torch = TorchStore::start(&python, "libuv");
    let address = torch.address();
    let secret = b"5d8a2f7c1e9b4d6a3f0c8e2b7a5d1f9c4e6b0a8d3f7c2e5a9b1d6f4c8e0a3b7d";
    let token = JobToken::new("torchrun-run-id", Some(secret)).unwrap();
    let id = [0x42u8; 128];
    for attempt in [0, 1] {
        let results: Vec<_> = std::thread::scope(|scope| {
            let ranks: Vec<_> = (0..4)
                .map(|rank| {
                    let (address, token) = (address.clone(), token.clone());
                    scope.spawn(move || {
                        let mut r = Rendezvous::agent(&address, attempt, &token, 4, rank, TIMEOUT)?;
                        r.exchange((rank == 0).then_some(&id[..]))
                    })
                })
                .collect();
            ranks.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (rank, got) in results.into_iter().enumerate() {
            assert_eq!(got.unwrap(), id, "attempt {attempt}, rank {rank}");
        }
    }
    // A worker still on attempt 0 after attempt 1 joined: refused, not mixed in.
    match Rendezvous::agent(&address, 0, &token, 4, 1, TIMEOUT) {
        Err(LaunchError::Environment { name, message }) => {
            assert_eq!(name, "TORCHELASTIC_RESTART_COUNT");
            assert!(message.contains("went backwards"), "{message}");
        }
        other => panic!("expected a restart count going backwards to be refused, got {other:?}"),
    }
    // Another client of the same store sees only sealed records: the id is not in them.
    let mut snoop = StoreClient::connect(&address, None, TIMEOUT).unwrap();
    let verdict = snoop
        .get("worker/attempt_1/ditto/verdict/1", TIMEOUT)
        .unwrap()
        .unwrap();
    assert!(
        !verdict.windows(16).any(|w| w == &id[..16]),
        "the id is sealed"
    );
}
