//! Socket reads bounded by a deadline for the whole read, not per `read` call: a peer
//! that trickles one byte every few seconds cannot stretch a handshake or a frame past
//! its deadline (a per-read timeout would restart with every byte).

use std::io::{self, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

/// Fills `buf` from `stream` before `deadline`: `TimedOut` once it passes,
/// `UnexpectedEof` if the peer closes first.
pub(crate) fn read_exact_by(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Err(ErrorKind::TimedOut.into()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads `N` bytes before `deadline`.
pub(crate) fn read_array_by<const N: usize>(
    stream: &mut TcpStream,
    deadline: Instant,
) -> io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    read_exact_by(stream, &mut bytes, deadline)?;
    Ok(bytes)
}

/// Writes all of `bytes` before `deadline` (a peer that does not read cannot hold the
/// writer past it).
pub(crate) fn write_all_by(
    stream: &mut TcpStream,
    bytes: &[u8],
    deadline: Instant,
) -> io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(ErrorKind::TimedOut.into());
    }
    stream.set_write_timeout(Some(left))?;
    stream.write_all(bytes)
}

/// Whether an error means the connection is closed (as opposed to slow).
pub(crate) fn is_closed(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe
            | ErrorKind::NotConnected
    )
}
