//! Horovod's rendezvous server as a [`Store`]: under `horovodrun` (its Gloo mode) the
//! launcher serves an HTTP key-value store on `HOROVOD_GLOO_RENDEZVOUS_ADDR:PORT`
//! (`horovod/runner/http/http_server.py`): `PUT /SCOPE/KEY` sets, `GET /SCOPE/KEY`
//! answers the value or 404, `DELETE /SCOPE/KEY` deletes. ditto's ranks keep their keys
//! in a scope of their own, [`SCOPE`]. The server has no wait, no add and no
//! compare-and-set: waits poll, and the other two are refused (the rendezvous does not
//! use them on this store).

use std::time::{Duration, Instant};

use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use ureq::Agent;

use super::Store;
use crate::{LaunchError, Result};

/// The server's scope for ditto's keys (Horovod's own are `global`, `local_*`, `cross_*`).
pub const SCOPE: &str = "ditto";
/// How often a wait asks again.
const POLL: Duration = Duration::from_millis(50);
/// The largest value read back (the rendezvous's records are far smaller).
const MAX_VALUE: u64 = 1 << 20;

/// A client of Horovod's HTTP rendezvous server.
pub struct HorovodStore {
    address: String,
    agent: Agent,
}

impl std::fmt::Debug for HorovodStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HorovodStore")
            .field("address", &self.address)
            .finish()
    }
}

impl HorovodStore {
    /// A client of the server at `address` (`host:port`), each request bounded by
    /// `timeout`. Nothing is sent yet.
    #[must_use]
    pub fn new(address: &str, timeout: Duration) -> HorovodStore {
        HorovodStore {
            address: address.to_string(),
            agent: agent(timeout),
        }
    }

    /// The URL of `key`: one path segment, since the server splits the path on `/`.
    fn url(&self, key: &str) -> String {
        let key = utf8_percent_encode(key, NON_ALPHANUMERIC);
        format!("http://{}/{SCOPE}/{key}", self.address)
    }

    fn failed(&self, during: &str, e: impl std::fmt::Display) -> LaunchError {
        LaunchError::Rendezvous {
            address: self.address.clone(),
            message: format!("Horovod's rendezvous server, {during}: {e}"),
        }
    }

    /// The value of `key` now, `None` when it is not set.
    fn read(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let during = || format!("GET {key}");
        let mut answer = self
            .agent
            .get(&self.url(key))
            .call()
            .map_err(|e| self.failed(&during(), e))?;
        match answer.status().as_u16() {
            200 => answer
                .body_mut()
                .with_config()
                .limit(MAX_VALUE)
                .read_to_vec()
                .map(Some)
                .map_err(|e| self.failed(&during(), e)),
            404 => Ok(None),
            code => Err(self.failed(&during(), format!("HTTP status {code}"))),
        }
    }

    /// `key`'s value once it is set, polling until `deadline`.
    fn poll(&self, key: &str, deadline: Instant) -> Result<Option<Vec<u8>>> {
        loop {
            if let Some(value) = self.read(key)? {
                return Ok(Some(value));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            std::thread::sleep(left.min(POLL));
        }
    }

    fn unsupported(op: &'static str) -> LaunchError {
        LaunchError::invalid(
            op,
            "Horovod's rendezvous server has no atomic operations (only PUT, GET and DELETE)",
        )
    }
}

/// An HTTP client whose every request ends within `timeout`, and which hands non-2xx
/// answers back (a 404 is an answer here, not an error).
fn agent(timeout: Duration) -> Agent {
    Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into()
}

impl Store for HorovodStore {
    fn address(&self) -> &str {
        &self.address
    }

    fn set(&mut self, key: &str, value: &[u8]) -> Result<()> {
        let answer = self
            .agent
            .put(&self.url(key))
            .send(value)
            .map_err(|e| self.failed(&format!("PUT {key}"), e))?;
        match answer.status().as_u16() {
            200 => Ok(()),
            code => Err(self.failed(&format!("PUT {key}"), format!("HTTP status {code}"))),
        }
    }

    fn get(&mut self, key: &str, timeout: Duration) -> Result<Option<Vec<u8>>> {
        self.poll(key, Instant::now() + timeout)
    }

    fn add(&mut self, _key: &str, _delta: i64) -> Result<i64> {
        Err(HorovodStore::unsupported("HorovodStore::add"))
    }

    fn check(&mut self, keys: &[&str]) -> Result<bool> {
        for key in keys {
            if self.read(key)?.is_none() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn wait(&mut self, keys: &[&str], timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        for key in keys {
            if self.poll(key, deadline)?.is_none() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn compare_set(&mut self, _key: &str, _expected: &[u8], _desired: &[u8]) -> Result<Vec<u8>> {
        Err(HorovodStore::unsupported("HorovodStore::compare_set"))
    }

    fn delete_key(&mut self, key: &str) -> Result<bool> {
        let existed = self.read(key)?.is_some();
        self.agent
            .delete(&self.url(key))
            .call()
            .map_err(|e| self.failed(&format!("DELETE {key}"), e))?;
        Ok(existed)
    }

    fn set_timeout(&mut self, timeout: Duration) {
        self.agent = agent(timeout);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::{HorovodStore, SCOPE};
    use crate::rendezvous::Store;
    use crate::LaunchError;

    type Kv = Arc<Mutex<HashMap<String, Vec<u8>>>>;

    /// A key-value server answering as Horovod's `KVStoreHandler` does: `PUT /scope/key`
    /// stores, `GET` answers the value or 404, `DELETE` removes; a path of any other shape
    /// is a 400. One request per connection. Returns its address and its contents.
    fn horovod_like_server() -> (String, Kv) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let kv = Arc::new(Mutex::new(HashMap::new()));
        let shared = Arc::clone(&kv);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let mut stream = stream.unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let mut parts = line.split_whitespace();
                let (method, path) = (
                    parts.next().unwrap().to_string(),
                    parts.next().unwrap().to_string(),
                );
                let mut length = 0;
                loop {
                    let mut header = String::new();
                    reader.read_line(&mut header).unwrap();
                    if header.trim().is_empty() {
                        break;
                    }
                    if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                let segments: Vec<&str> = path.split('/').collect();
                let (status, value) = match (segments.len(), method.as_str()) {
                    (3, "PUT") => {
                        shared.lock().unwrap().insert(path.clone(), body);
                        (200, Vec::new())
                    }
                    (3, "GET") => match shared.lock().unwrap().get(&path) {
                        Some(v) => (200, v.clone()),
                        None => (404, Vec::new()),
                    },
                    (3, "DELETE") => {
                        shared.lock().unwrap().remove(&path);
                        (200, Vec::new())
                    }
                    _ => (400, Vec::new()),
                };
                let head = format!(
                    "HTTP/1.0 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    value.len()
                );
                stream.write_all(head.as_bytes()).unwrap();
                stream.write_all(&value).unwrap();
            }
        });
        (address, kv)
    }

    #[test]
    fn keys_with_slashes_round_trip_and_waits_end_in_time() {
        let (address, kv) = horovod_like_server();
        let mut store = HorovodStore::new(&address, Duration::from_secs(5));
        let key = "ditto/check-in/1";
        store.set(key, b"\x00record\xff").unwrap();
        // One path segment under ditto's scope, as the server splits on '/'.
        assert!(kv
            .lock()
            .unwrap()
            .keys()
            .all(|k| k.starts_with(&format!("/{SCOPE}/")) && k.matches('/').count() == 2));
        let got = store.get(key, Duration::from_secs(1)).unwrap();
        assert_eq!(got.as_deref(), Some(&b"\x00record\xff"[..]));
        assert!(store.check(&[key]).unwrap());
        assert!(!store.check(&[key, "ditto/verdict/1"]).unwrap());
        let started = std::time::Instant::now();
        assert_eq!(
            store
                .get("ditto/verdict/1", Duration::from_millis(200))
                .unwrap(),
            None
        );
        assert!(!store
            .wait(&["ditto/verdict/1"], Duration::from_millis(200))
            .unwrap());
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(store.delete_key(key).unwrap());
        assert!(!store.check(&[key]).unwrap());
        assert!(matches!(
            store.add("n", 1),
            Err(LaunchError::InvalidArgument { .. })
        ));
        assert!(matches!(
            store.compare_set("n", b"", b"1"),
            Err(LaunchError::InvalidArgument { .. })
        ));
    }

    #[test]
    fn a_server_that_is_gone_is_a_typed_error() {
        let address = {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().to_string()
        };
        let mut store = HorovodStore::new(&address, Duration::from_secs(2));
        let error = store.set("ditto/k", b"v").unwrap_err();
        assert!(matches!(error, LaunchError::Rendezvous { .. }), "{error}");
        assert!(
            error.to_string().contains("Horovod's rendezvous server"),
            "{error}"
        );
    }
}
