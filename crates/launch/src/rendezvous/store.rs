//! What the rendezvous needs from a store: PyTorch's `Store` operations, in Rust form.
//! Two implementations: [`StoreClient`](super::StoreClient), a TCPStore client (of
//! torchrun's agent store, or of ditto's own store behind its handshake), and rank 0's
//! in-process handle on ditto's own store ([`RunningStore::local`](super::RunningStore::local)).
//!
//! Keys are named as a torch client names them (`"ditto/check-in/1"`); on the wire they
//! carry torch's leading `/`.

use std::time::Duration;

use crate::Result;

/// A key-value store shared by the ranks of a job (PyTorch's `c10d::Store`).
pub trait Store: Send {
    /// Where the store is, for messages.
    fn address(&self) -> &str;

    /// Sets `key` to `value` (waking every client waiting for it).
    fn set(&mut self, key: &str, value: &[u8]) -> Result<()>;

    /// The value of `key`, waiting up to `timeout` for it to be set; `None` when it was
    /// not set in time (the store stays usable).
    fn get(&mut self, key: &str, timeout: Duration) -> Result<Option<Vec<u8>>>;

    /// Adds `delta` to the integer under `key` (0 when absent) and returns the sum;
    /// `add(key, 0)` reads a counter.
    fn add(&mut self, key: &str, delta: i64) -> Result<i64>;

    /// Whether every key in `keys` is set, without waiting.
    fn check(&mut self, keys: &[&str]) -> Result<bool>;

    /// Waits up to `timeout` for every key in `keys` to be set; false when they were not
    /// (the wait is cancelled and the store stays usable).
    fn wait(&mut self, keys: &[&str], timeout: Duration) -> Result<bool>;

    /// torch's `compare_set`: sets `key` to `desired` if its value is `expected` (or it
    /// is absent and `expected` is empty); returns the value now stored.
    fn compare_set(&mut self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>>;

    /// Deletes `key`; whether it was there.
    fn delete_key(&mut self, key: &str) -> Result<bool>;

    /// Sets how long one answer may take from now on (a store reached over a socket;
    /// others ignore it).
    fn set_timeout(&mut self, _timeout: Duration) {}
}
