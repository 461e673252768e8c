//! PyTorch's `TCPStore` wire protocol, as spoken by torch 2.15's client and both of its
//! server backends (classic and libuv), which ditto's client and server speak too.
//! `crates/distributed/tests/fixtures/tcpstore_frames_*.txt` hold the frames recorded
//! from torch (`tests/scripts/record_tcpstore_frames.py`), and the conformance test replays
//! them against both sides.
//!
//! Every query is one byte, the query type, followed by its arguments; integers are
//! little-endian (torch writes its native byte order, little-endian on every platform it
//! ships for); a string or byte vector is a `u64` length and the bytes:
//!
//! | query | arguments | answer |
//! |---|---|---|
//! | `VALIDATE` 0 | `u32` 0x3C85F7CE | none |
//! | `SET` 1 | key, value | none |
//! | `COMPARE_SET` 2 | key, expected, desired | the value now stored |
//! | `GET` 3 | key (present: clients `WAIT` first) | value |
//! | `ADD` 4 | key, `i64` | `i64` sum (stored as its decimal text) |
//! | `CHECK` 5 | `u64` n, n keys | `u8` 0 ready / 1 not ready |
//! | `WAIT` 6 | `u64` n, n keys | `u8` 0 once all are set; `CANCEL_WAIT` ends it with 1 |
//! | `GETNUMKEYS` 7 | | `i64` |
//! | `DELETE_KEY` 8 | key | `i64` number deleted |
//! | `APPEND` 9 | key, value | none |
//! | `MULTI_GET` 10 | `u64` n, n keys | n values |
//! | `MULTI_SET` 11 | `u64` n, n (key, value) | none |
//! | `CANCEL_WAIT` 12 | | `u8` 1 |
//! | `PING` 13 | `u32` nonce | the same `u32` |
//!
//! torch's client puts `/` in front of every key (its `keyPrefix_`), so Python's
//! `store.get("a")` reads the wire key `/a`; ditto's client does the same, so both
//! name a key alike. Queries 14 to 18 (queues, `LIST_KEYS`, `BARRIER`) are not spoken
//! by ditto; its server closes a connection that sends them.

use std::io;
use std::net::TcpStream;
use std::time::Instant;

use crate::rendezvous::timed_io::{read_array_by, read_exact_by};

/// What a client sends after connecting, so the server knows it speaks the protocol.
pub const VALIDATION_MAGIC: u32 = 0x3C85_F7CE;

/// The query types, numbered as in torch's `QueryType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Query {
    Validate = 0,
    Set = 1,
    CompareSet = 2,
    Get = 3,
    Add = 4,
    Check = 5,
    Wait = 6,
    GetNumKeys = 7,
    DeleteKey = 8,
    Append = 9,
    MultiGet = 10,
    MultiSet = 11,
    CancelWait = 12,
    Ping = 13,
}

impl Query {
    /// The query a type byte names, if ditto speaks it.
    pub(crate) fn from_byte(byte: u8) -> Option<Query> {
        use Query::*;
        [
            Validate, Set, CompareSet, Get, Add, Check, Wait, GetNumKeys, DeleteKey, Append,
            MultiGet, MultiSet, CancelWait, Ping,
        ]
        .into_iter()
        .find(|q| *q as u8 == byte)
    }
}

/// `CHECK`'s answers.
pub(crate) const READY: u8 = 0;
pub(crate) const NOT_READY: u8 = 1;
/// `WAIT`'s answers.
pub(crate) const STOP_WAITING: u8 = 0;
pub(crate) const WAIT_CANCELED: u8 = 1;

/// The longest key either side accepts, in bytes.
pub const MAX_KEY_LEN: u64 = 4096;
/// The longest value either side accepts, in bytes (ditto's records are a few hundred).
pub const MAX_VALUE_LEN: u64 = 1 << 20;
/// The most keys in one `CHECK`, `WAIT`, `MULTI_GET` or `MULTI_SET`.
pub const MAX_KEYS_PER_QUERY: u64 = 1 << 16;

/// A query or answer under construction.
#[derive(Debug, Default)]
pub(crate) struct Frame(pub(crate) Vec<u8>);

impl Frame {
    pub(crate) fn query(query: Query) -> Frame {
        Frame(vec![query as u8])
    }
    pub(crate) fn byte(mut self, byte: u8) -> Frame {
        self.0.push(byte);
        self
    }
    pub(crate) fn u32(mut self, n: u32) -> Frame {
        self.0.extend_from_slice(&n.to_le_bytes());
        self
    }
    pub(crate) fn u64(mut self, n: u64) -> Frame {
        self.0.extend_from_slice(&n.to_le_bytes());
        self
    }
    pub(crate) fn i64(mut self, n: i64) -> Frame {
        self.0.extend_from_slice(&n.to_le_bytes());
        self
    }
    /// A length-prefixed byte string (a key or a value).
    pub(crate) fn bytes(self, bytes: &[u8]) -> Frame {
        let mut frame = self.u64(bytes.len() as u64);
        frame.0.extend_from_slice(bytes);
        frame
    }
}

/// Why a frame could not be read.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// The socket failed, closed or timed out.
    Io(io::Error),
    /// A length beyond its cap, or a value that is not what the protocol allows.
    Bad(String),
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        FrameError::Io(e)
    }
}

/// Reads the parts of frames from one socket before a deadline.
pub(crate) struct FrameReader<'a> {
    pub(crate) stream: &'a mut TcpStream,
    pub(crate) deadline: Instant,
}

impl FrameReader<'_> {
    pub(crate) fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(read_array_by::<1>(self.stream, self.deadline)?[0])
    }
    pub(crate) fn u32(&mut self) -> Result<u32, FrameError> {
        Ok(u32::from_le_bytes(read_array_by(
            self.stream,
            self.deadline,
        )?))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, FrameError> {
        Ok(u64::from_le_bytes(read_array_by(
            self.stream,
            self.deadline,
        )?))
    }
    pub(crate) fn i64(&mut self) -> Result<i64, FrameError> {
        Ok(i64::from_le_bytes(read_array_by(
            self.stream,
            self.deadline,
        )?))
    }
    /// A length-prefixed byte string of at most `cap` bytes (checked before allocating).
    pub(crate) fn bytes(&mut self, cap: u64, what: &str) -> Result<Vec<u8>, FrameError> {
        let len = self.u64()?;
        if len > cap {
            return Err(FrameError::Bad(format!(
                "a {what} of {len} bytes, more than {cap}"
            )));
        }
        let mut bytes = vec![0u8; len as usize];
        read_exact_by(self.stream, &mut bytes, self.deadline)?;
        Ok(bytes)
    }
    pub(crate) fn key(&mut self) -> Result<Vec<u8>, FrameError> {
        self.bytes(MAX_KEY_LEN, "key")
    }
    pub(crate) fn value(&mut self) -> Result<Vec<u8>, FrameError> {
        self.bytes(MAX_VALUE_LEN, "value")
    }
    /// A key count, at most [`MAX_KEYS_PER_QUERY`].
    pub(crate) fn count(&mut self) -> Result<usize, FrameError> {
        let n = self.u64()?;
        if n > MAX_KEYS_PER_QUERY {
            return Err(FrameError::Bad(format!(
                "{n} keys in one query, more than {MAX_KEYS_PER_QUERY}"
            )));
        }
        Ok(n as usize)
    }
}

/// The wire key of a key as a torch client names it (`/` in front, like torch's
/// `keyPrefix_`).
pub(crate) fn wire_key(key: &str) -> Vec<u8> {
    let mut wire = Vec::with_capacity(key.len() + 1);
    wire.push(b'/');
    wire.extend_from_slice(key.as_bytes());
    wire
}
