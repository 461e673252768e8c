//! A TCPStore client: of torchrun's agent store (plain TCPStore, as torch's own client
//! speaks it) and of ditto's own store (the same queries, after the job token's
//! handshake). Every answer is read under a deadline and every length checked against
//! its cap before anything is allocated, so a store that answers garbage, stalls or
//! closes mid-frame is a typed error, never a hang or a panic.

use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::wire::{
    wire_key, Frame, FrameError, FrameReader, Query, NOT_READY, READY, STOP_WAITING,
    VALIDATION_MAGIC, WAIT_CANCELED,
};
use crate::rendezvous::gate::{self, Passage};
use crate::rendezvous::store::Store;
use crate::rendezvous::timed_io::write_all_by;
use crate::rendezvous::JobToken;
use crate::{LaunchError, Result};

/// How long the client waits between connection attempts.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The job token handshake a client runs before its first query (ditto's own store).
#[derive(Clone, Copy, Debug)]
pub struct Handshake<'a> {
    /// The job's token.
    pub token: &'a JobToken,
    /// The world size this rank was launched with.
    pub world: u32,
    /// This rank.
    pub rank: u32,
}

/// A connection to a TCPStore server.
#[derive(Debug)]
pub struct StoreClient {
    stream: TcpStream,
    address: String,
    /// How long one answer may take.
    timeout: Duration,
}

impl StoreClient {
    /// Connects to the store at `address` (`host:port`), trying every address it
    /// resolves to, in order, again and again until one answers or `timeout` passes;
    /// runs `handshake` when given (a connection the store closes before its challenge
    /// is retried); then validates the connection as torch's client does (`VALIDATE`,
    /// and a `PING` whose nonce must come back). Later queries wait for their answers up
    /// to `timeout` each.
    pub fn connect(
        address: &str,
        handshake: Option<Handshake<'_>>,
        timeout: Duration,
    ) -> Result<Self> {
        let deadline = Instant::now() + timeout;
        let mut last = String::from("no address tried");
        loop {
            match address.to_socket_addrs() {
                Err(e) => last = format!("resolving {address}: {e}"),
                Ok(addrs) => {
                    for addr in addrs {
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break;
                        }
                        let stream = match TcpStream::connect_timeout(
                            &addr,
                            left.min(Duration::from_secs(1)),
                        ) {
                            Ok(stream) => stream,
                            Err(e) => {
                                last = format!("{addr}: {e}");
                                continue;
                            }
                        };
                        let _ = stream.set_nodelay(true);
                        let mut client = StoreClient {
                            stream,
                            address: address.to_string(),
                            timeout,
                        };
                        if let Some(h) = handshake {
                            let passage = gate::pass(
                                &mut client.stream,
                                h.token,
                                h.world,
                                h.rank,
                                deadline,
                                address,
                            )?;
                            if let Passage::Retry = passage {
                                last = format!("{addr} closed the connection before its challenge");
                                continue;
                            }
                        }
                        client.validate()?;
                        return Ok(client);
                    }
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(LaunchError::Timeout {
                    op: format!("rendezvous: connecting to the store at {address} (last: {last})"),
                    timeout,
                    missing: if handshake.is_some() {
                        vec![0]
                    } else {
                        Vec::new()
                    },
                });
            }
            std::thread::sleep(RETRY_PAUSE.min(left));
        }
    }

    /// torch's connection check: `VALIDATE` with its magic number, then a `PING` that
    /// must echo a fresh nonce.
    fn validate(&mut self) -> Result<()> {
        let mut nonce = [0u8; 4];
        getrandom::fill(&mut nonce).map_err(|e| self.garbage(format!("no random nonce: {e}")))?;
        let nonce = u32::from_le_bytes(nonce);
        let mut frames = Frame::query(Query::Validate).u32(VALIDATION_MAGIC);
        frames
            .0
            .extend_from_slice(&Frame::query(Query::Ping).u32(nonce).0);
        self.send(frames, "VALIDATE")?;
        let echoed = self.read("PING", |r| r.u32())?;
        if echoed != nonce {
            return Err(self.garbage(format!(
                "it answered PING {nonce:#x} with {echoed:#x}: not a TCPStore server"
            )));
        }
        Ok(())
    }

    fn garbage(&self, message: String) -> LaunchError {
        LaunchError::Rendezvous {
            address: self.address.clone(),
            message: format!("the store answered garbage: {message}"),
        }
    }

    fn send(&mut self, frame: Frame, what: &str) -> Result<()> {
        write_all_by(&mut self.stream, &frame.0, Instant::now() + self.timeout)
            .map_err(|e| self.frame_error(what, FrameError::Io(e)))
    }

    /// Reads an answer with `part`, under a deadline of [`timeout`](Self::timeout).
    fn read<T>(
        &mut self,
        what: &str,
        part: impl FnOnce(&mut FrameReader<'_>) -> std::result::Result<T, FrameError>,
    ) -> Result<T> {
        let mut reader = FrameReader {
            stream: &mut self.stream,
            deadline: Instant::now() + self.timeout,
        };
        part(&mut reader).map_err(|e| self.frame_error(what, e))
    }

    fn frame_error(&self, what: &str, e: FrameError) -> LaunchError {
        match e {
            FrameError::Bad(why) => self.garbage(format!("{what}: {why}")),
            FrameError::Io(e) if crate::rendezvous::timed_io::is_closed(&e) => {
                LaunchError::StoreClosed {
                    address: self.address.clone(),
                    during: what.to_string(),
                }
            }
            FrameError::Io(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                LaunchError::Rendezvous {
                    address: self.address.clone(),
                    message: format!("the store did not answer {what} within {:?}", self.timeout),
                }
            }
            FrameError::Io(source) => LaunchError::Io {
                context: format!("rendezvous store at {}: {what}", self.address),
                source,
            },
        }
    }

    fn keys_frame(query: Query, keys: &[&str]) -> Frame {
        keys.iter()
            .fold(Frame::query(query).u64(keys.len() as u64), |f, k| {
                f.bytes(&wire_key(k))
            })
    }
}

impl Store for StoreClient {
    fn address(&self) -> &str {
        &self.address
    }

    fn set(&mut self, key: &str, value: &[u8]) -> Result<()> {
        self.send(
            Frame::query(Query::Set).bytes(&wire_key(key)).bytes(value),
            "SET",
        )
    }

    fn get(&mut self, key: &str, timeout: Duration) -> Result<Option<Vec<u8>>> {
        if !self.wait(&[key], timeout)? {
            return Ok(None);
        }
        self.send(Frame::query(Query::Get).bytes(&wire_key(key)), "GET")?;
        self.read("GET", |r| r.value()).map(Some)
    }

    fn add(&mut self, key: &str, delta: i64) -> Result<i64> {
        self.send(
            Frame::query(Query::Add).bytes(&wire_key(key)).i64(delta),
            "ADD",
        )?;
        self.read("ADD", |r| r.i64())
    }

    fn check(&mut self, keys: &[&str]) -> Result<bool> {
        self.send(Self::keys_frame(Query::Check, keys), "CHECK")?;
        match self.read("CHECK", |r| r.u8())? {
            READY => Ok(true),
            NOT_READY => Ok(false),
            other => Err(self.garbage(format!("CHECK answered {other}; expected 0 or 1"))),
        }
    }

    fn wait(&mut self, keys: &[&str], timeout: Duration) -> Result<bool> {
        self.send(Self::keys_frame(Query::Wait, keys), "WAIT")?;
        let waited = FrameReader {
            stream: &mut self.stream,
            deadline: Instant::now() + timeout,
        }
        .u8();
        match waited {
            Ok(STOP_WAITING) => return Ok(true),
            Ok(other) => return Err(self.garbage(format!("WAIT answered {other}; expected 0"))),
            Err(FrameError::Io(e)) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => return Err(self.frame_error("WAIT", e)),
        }
        // Past the caller's timeout: cancel, as torch's client does. The store may have
        // answered the wait just before the cancel arrived; then both answers come.
        self.send(Frame::query(Query::CancelWait), "CANCEL_WAIT")?;
        match self.read("CANCEL_WAIT", |r| r.u8())? {
            WAIT_CANCELED => Ok(false),
            STOP_WAITING => match self.read("CANCEL_WAIT", |r| r.u8())? {
                WAIT_CANCELED => Ok(true),
                other => Err(self.garbage(format!("CANCEL_WAIT answered {other}; expected 1"))),
            },
            other => Err(self.garbage(format!("CANCEL_WAIT answered {other}; expected 1"))),
        }
    }

    fn compare_set(&mut self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        let frame = Frame::query(Query::CompareSet)
            .bytes(&wire_key(key))
            .bytes(expected)
            .bytes(desired);
        self.send(frame, "COMPARE_SET")?;
        self.read("COMPARE_SET", |r| r.value())
    }

    fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    fn delete_key(&mut self, key: &str) -> Result<bool> {
        self.send(
            Frame::query(Query::DeleteKey).bytes(&wire_key(key)),
            "DELETE_KEY",
        )?;
        match self.read("DELETE_KEY", |r| r.i64())? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(self.garbage(format!("DELETE_KEY answered {other}; expected 0 or 1"))),
        }
    }
}
