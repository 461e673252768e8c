//! One proven connection's TCPStore queries, served by ditto's store ([`serve`]). A
//! session ends when the peer closes, sends anything the protocol does not allow (an
//! unknown query, a length beyond its cap, `GET` of a key that is not set: torch's server
//! closes the connection for these too), or the store stops.

use std::io::ErrorKind;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::hub::Hub;
use super::wire::{
    Frame, FrameError, FrameReader, Query, NOT_READY, READY, STOP_WAITING, VALIDATION_MAGIC,
    WAIT_CANCELED,
};
use crate::rendezvous::timed_io::write_all_by;

/// How long the rest of a query may take to arrive once its first byte has.
const FRAME_DEADLINE: Duration = Duration::from_secs(30);
/// How long an answer may take to write to a peer that does not read.
const WRITE_DEADLINE: Duration = Duration::from_secs(10);
/// How often a `WAIT` looks for a `CANCEL_WAIT` or a closed connection.
const WAIT_POLL: Duration = Duration::from_millis(20);

/// Serves `stream` until the session ends; why it ended.
pub(crate) fn serve(stream: &mut TcpStream, hub: &Hub) -> String {
    loop {
        // Between queries a rank may be silent for hours (training); stopping the store
        // shuts the socket down, which ends this read.
        let mut first = [0u8; 1];
        let read = stream
            .set_read_timeout(None)
            .and_then(|()| std::io::Read::read(stream, &mut first));
        match read {
            Ok(0) => return "closed".into(),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return format!("closed: {e}"),
        }
        let Some(query) = Query::from_byte(first[0]) else {
            return format!("query type {} is not one ditto's store speaks", first[0]);
        };
        match answer(stream, hub, query) {
            Ok(()) => {}
            Err(FrameError::Io(e)) => return format!("{query:?}: {e}"),
            Err(FrameError::Bad(why)) => return format!("{query:?}: {why}"),
        }
    }
}

/// Reads the rest of `query` and answers it.
fn answer(stream: &mut TcpStream, hub: &Hub, query: Query) -> Result<(), FrameError> {
    let mut read = FrameReader {
        stream,
        deadline: Instant::now() + FRAME_DEADLINE,
    };
    let bad = |why: String| FrameError::Bad(why);
    let reply = match query {
        Query::Validate => {
            let magic = read.u32()?;
            if magic != VALIDATION_MAGIC {
                return Err(bad(format!("validation magic {magic:#x}")));
            }
            None
        }
        Query::Ping => Some(Frame::default().u32(read.u32()?)),
        Query::Set => {
            let (key, value) = (read.key()?, read.value()?);
            hub.lock().kv.set(&key, value).map_err(bad)?;
            hub.changed.notify_all();
            None
        }
        Query::CompareSet => {
            let (key, expected, desired) = (read.key()?, read.value()?, read.value()?);
            let now = hub
                .lock()
                .kv
                .compare_set(&key, expected, desired)
                .map_err(bad)?;
            hub.changed.notify_all();
            Some(Frame::default().bytes(&now))
        }
        Query::Get => {
            let key = read.key()?;
            let value = hub.lock().kv.get(&key).cloned();
            let value = value.ok_or_else(|| bad("GET of a key that is not set".into()))?;
            Some(Frame::default().bytes(&value))
        }
        Query::Add => {
            let (key, delta) = (read.key()?, read.i64()?);
            let sum = hub.lock().kv.add(&key, delta).map_err(bad)?;
            hub.changed.notify_all();
            Some(Frame::default().i64(sum))
        }
        Query::Check => {
            let keys = read_keys(&mut read)?;
            let ready = hub.lock().kv.all_present(&keys);
            Some(Frame::default().byte(if ready { READY } else { NOT_READY }))
        }
        Query::Wait => {
            let keys = read_keys(&mut read)?;
            return wait(read.stream, hub, &keys);
        }
        Query::GetNumKeys => Some(Frame::default().i64(hub.lock().kv.len() as i64)),
        Query::DeleteKey => {
            let key = read.key()?;
            let deleted = hub.lock().kv.delete(&key);
            Some(Frame::default().i64(i64::from(deleted)))
        }
        Query::Append => {
            let (key, tail) = (read.key()?, read.value()?);
            hub.lock().kv.append(&key, &tail).map_err(bad)?;
            hub.changed.notify_all();
            None
        }
        Query::MultiGet => {
            let keys = read_keys(&mut read)?;
            let state = hub.lock();
            let mut frame = Frame::default();
            for key in &keys {
                let value = state
                    .kv
                    .get(key)
                    .ok_or_else(|| bad("MULTI_GET of a key that is not set".into()))?;
                frame = frame.bytes(value);
            }
            Some(frame)
        }
        Query::MultiSet => {
            let n = read.count()?;
            for _ in 0..n {
                let (key, value) = (read.key()?, read.value()?);
                hub.lock().kv.set(&key, value).map_err(bad)?;
            }
            hub.changed.notify_all();
            None
        }
        Query::CancelWait => Some(Frame::default().byte(WAIT_CANCELED)),
    };
    if let Some(frame) = reply {
        write_all_by(read.stream, &frame.0, Instant::now() + WRITE_DEADLINE)?;
    }
    Ok(())
}

fn read_keys(read: &mut FrameReader<'_>) -> Result<Vec<Vec<u8>>, FrameError> {
    let n = read.count()?;
    (0..n).map(|_| read.key()).collect()
}

/// `WAIT`: answers `STOP_WAITING` once every key is set, or `WAIT_CANCELED` when the
/// client sends `CANCEL_WAIT` first (torch's client does when its own timeout expires).
fn wait(stream: &mut TcpStream, hub: &Hub, keys: &[Vec<u8>]) -> Result<(), FrameError> {
    let closed = || FrameError::Io(ErrorKind::UnexpectedEof.into());
    loop {
        let ready = {
            let state = hub.lock();
            if state.stop {
                return Err(closed());
            }
            let state = if state.kv.all_present(keys) {
                state
            } else {
                hub.wait_change(state, WAIT_POLL)
            };
            state.kv.all_present(keys)
        };
        if ready {
            return Ok(write_all_by(
                stream,
                &[STOP_WAITING],
                Instant::now() + WRITE_DEADLINE,
            )?);
        }
        let mut next = [0u8; 1];
        let peeked = stream
            .set_nonblocking(true)
            .and_then(|()| stream.peek(&mut next));
        stream.set_nonblocking(false)?;
        match peeked {
            Ok(0) => return Err(closed()),
            Ok(_) => {
                std::io::Read::read_exact(stream, &mut next)?;
                if next[0] != Query::CancelWait as u8 {
                    return Err(FrameError::Bad(format!(
                        "query type {} while waiting; only CANCEL_WAIT may come",
                        next[0]
                    )));
                }
                return Ok(write_all_by(
                    stream,
                    &[WAIT_CANCELED],
                    Instant::now() + WRITE_DEADLINE,
                )?);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
    }
}
